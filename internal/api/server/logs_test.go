package server

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestLogStreamOutlivesWriteTimeout: a followed log goes on past the
// server's write timeout, each write given its own window, and each part
// reaches the client as it is written, not when the stream ends.
func TestLogStreamOutlivesWriteTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	next := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As the guard hands it over: wrapped, to be unwrapped.
		ww := &statusWriter{ResponseWriter: w}
		sw := &streamWriter{w: ww, rc: http.NewResponseController(ww), window: writeWindow(r)}
		for i := range 4 {
			if _, err := fmt.Fprintf(sw, "line %d\n", i); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			<-next // the client has read the line
			time.Sleep(timeout / 2)
		}
	}))
	srv.Config.WriteTimeout = timeout
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := range 4 {
		line, err := rd.ReadString('\n')
		if want := fmt.Sprintf("line %d\n", i); line != want || err != nil {
			t.Fatalf("read %q (%v), want %q: the stream was cut or held back", line, err, want)
		}
		next <- struct{}{}
	}
}
