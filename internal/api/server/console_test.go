package server

import (
	"net/http"
	"testing"
)

// TestConsoleMountedBesideTheAPI: the console's paths and the API's are
// one mux, so that a path or a method neither serves is answered as one
// would answer it: a wrong method is a 405 with Allow, an unknown path a
// 404, on the console's paths and on /healthz alike.
func TestConsoleMountedBesideTheAPI(t *testing.T) {
	f := newFixture(t, nil)
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
		a := f.do(t, asAdmin, tc.method, tc.path, nil, "")
		if a.status != tc.status || a.header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q; want %d, Allow %q", tc.method, tc.path, a.status, a.header.Get("Allow"), tc.status, tc.allow)
		}
	}
}
