package server

import (
	"fmt"
	"net/http"
)

// Header limits. net/http answers a request whose headers pass the
// server's MaxHeaderBytes with a plain-text 431 of its own, so the server
// is given ServerMaxHeaderBytes, well above MaxHeaderBytes, and
// LimitHeaders answers what lies between with the API's JSON error.
const (
	MaxHeaderBytes       = 32 << 10
	ServerMaxHeaderBytes = 256 << 10
)

// LimitHeaders refuses, with a JSON 431, a request whose request line and
// headers together exceed MaxHeaderBytes, before next sees it.
func LimitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerBytes(r); n > MaxHeaderBytes {
			writeError(w, http.StatusRequestHeaderFieldsTooLarge, "headers_too_large",
				fmt.Sprintf("the request line and headers are %d KiB, over the limit of %d KiB", (n+1023)/1024, MaxHeaderBytes>>10))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// headerBytes counts the request line and headers as sent, near enough:
// each header line is its name, ": ", its value and CRLF.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n + len(r.Host) + 8 // Host: moved out of Header
}
