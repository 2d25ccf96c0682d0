package server_test

import (
	"net/http"
	"testing"

	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
)

// TestConsoleMountedBesideTheAPI: the console's paths and the API's are
// one mux, so that a path or a method neither serves is answered as one
// would answer it: a wrong method is a 405 with Allow, an unknown path a
// 404, on the console's paths and on /healthz alike.
func TestConsoleMountedBesideTheAPI(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodPost, "/gpus", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodDelete, "/", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/nowhere", http.StatusNotFound, ""},
		{http.MethodGet, "/signin", http.StatusOK, ""},
	} {
		a := f.Do(t, servertest.AsAdmin, tc.method, tc.path, nil, "")
		if a.Status != tc.status || a.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q; want %d, Allow %q", tc.method, tc.path, a.Status, a.Header.Get("Allow"), tc.status, tc.allow)
		}
	}
}
