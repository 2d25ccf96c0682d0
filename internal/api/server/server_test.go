package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// quoted matches a Go-quoted string, in which a message repeats what the
// caller sent.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// checkOwnWords is servertest.CheckMessage for messages that may quote
// the caller's input, which may hold anything: only the message's own
// words are checked.
func checkOwnWords(t *testing.T, msg string) {
	t.Helper()
	servertest.CheckMessage(t, quoted.ReplaceAllString(msg, `""`))
}

// eventsWithoutSource checks that every event's source is the test's
// address and drops it, so that events can be compared whole.
func eventsWithoutSource(t *testing.T, events []audit.Event) []audit.Event {
	t.Helper()
	var out []audit.Event
	for i, e := range events {
		if !strings.HasPrefix(e.Source, "127.0.0.1:") {
			t.Errorf("event %d: source %q, want the test's address", i, e.Source)
		}
		e.Source = ""
		out = append(out, e)
	}
	return out
}

// roleOf and callerOf are the role and the audit log's name of the
// fixture's callers.
var (
	roleOf   = map[string]string{servertest.AsAdmin: "admin", servertest.AsAlice: "user", servertest.AsBob: "user", servertest.AsViewer: "viewer"}
	callerOf = map[string]string{servertest.AsAdmin: "root (token root-laptop)", servertest.AsAlice: "alice (token alice-laptop)", servertest.AsBob: "bob (token bob-laptop)", servertest.AsViewer: "grafana (token grafana)"}
)

// TestEndpointsByRole calls every endpoint as every kind of caller: who
// gets in, the error the rest get, and the one audit event each refusal
// leaves.
func TestEndpointsByRole(t *testing.T) {
	f, nodes := newNodesFixture(t)
	now := f.Clock.Now()
	stopPath := "/api/v1/containers/alice-train/stop"
	endpoints := []struct {
		method, path, body string
		act                auth.Action
		// denied lists the authenticated callers refused with 403.
		denied map[string]bool
	}{
		{"GET", "/api/v1/whoami", "", auth.ActWhoami, nil},
		{"GET", "/api/v1/gpus", "", auth.ActGPUsRead, nil},
		{"GET", "/api/v1/containers", "", auth.ActContainersRead, nil},
		{"GET", "/api/v1/usage", "", auth.ActUsageRead, nil},
		{"GET", "/api/v1/usage.csv", "", auth.ActUsageRead, nil},
		{"GET", "/api/v1/waste", "", auth.ActWasteRead, nil},
		{"GET", "/api/v1/whatif", "", auth.ActUsageRead, nil},
		{"GET", "/api/v1/advice", "", auth.ActUsageRead, nil},
		{"GET", "/api/v1/snapshot", "", auth.ActGPUsRead, nil},
		{"GET", "/api/v1/audit", "", auth.ActAuditRead, map[string]bool{servertest.AsAlice: true, servertest.AsBob: true, servertest.AsViewer: true}},
		{"POST", stopPath, `{"reason":"done"}`, auth.ActContainerStop, map[string]bool{servertest.AsBob: true, servertest.AsViewer: true}},
		{"GET", "/api/v1/nodes", "", auth.ActNodesRead, nil},
		{"POST", "/api/v1/nodes/gpu-a/drain", "", auth.ActNodeDrain, map[string]bool{servertest.AsAlice: true, servertest.AsBob: true, servertest.AsViewer: true}},
		{"POST", "/api/v1/nodes/gpu-a/undrain", "", auth.ActNodeDrain, map[string]bool{servertest.AsAlice: true, servertest.AsBob: true, servertest.AsViewer: true}},
	}
	unauthenticated := map[string]struct {
		code, caller string
	}{
		servertest.AsNone:    {auth.CodeNoCredentials, "unknown"},
		servertest.AsBad:     {auth.CodeBadToken, "unknown"},
		servertest.AsExpired: {auth.CodeExpired, "alice (token alice-old)"},
	}
	roles, callers := roleOf, callerOf

	for _, ep := range endpoints {
		for _, caller := range []string{servertest.AsAdmin, servertest.AsAlice, servertest.AsBob, servertest.AsViewer, servertest.AsNone, servertest.AsBad, servertest.AsExpired} {
			t.Run(ep.method+" "+ep.path+" as "+caller, func(t *testing.T) {
				var body io.Reader
				if ep.body != "" {
					body = strings.NewReader(ep.body)
				}
				a := f.Do(t, caller, ep.method, ep.path, body, "")
				got, acted := f.Audit.TakeActed()
				events := eventsWithoutSource(t, got)
				base := audit.Event{Time: now, Kind: audit.KindAPI, Action: string(ep.act), Target: ep.method + " " + ep.path}
				var want []audit.Event
				switch u, unauth := unauthenticated[caller]; {
				case unauth:
					a.APIError(t, http.StatusUnauthorized, u.code)
					if got := a.Header.Get("WWW-Authenticate"); got != `Bearer realm="gpumeter"` {
						t.Errorf("WWW-Authenticate %q", got)
					}
					e := base
					e.Caller, e.Status, e.Outcome, e.Error = u.caller, http.StatusUnauthorized, audit.OutcomeDenied, u.code
					want = []audit.Event{e}
				case ep.denied[caller]:
					e := base
					if ep.act == auth.ActContainerStop && caller == servertest.AsBob {
						// Refused by the handler, which knows the
						// container, and answered as a name nobody has.
						a.APIError(t, http.StatusNotFound, apitype.CodeNotFound)
						e.Target, e.Error = "container "+servertest.AliceTrain, "bob may containers.stop only for their own containers and usage"
					} else {
						e.Error = a.APIError(t, http.StatusForbidden, apitype.CodeForbidden).Message
					}
					e.Caller, e.Role, e.Status, e.Outcome = callers[caller], roles[caller], http.StatusForbidden, audit.OutcomeDenied
					want = []audit.Event{e}
				default:
					if a.Status != http.StatusOK {
						t.Fatalf("status %d %s, want 200", a.Status, a.Body)
					}
					e := base
					e.Caller, e.Role, e.Status, e.Outcome = callers[caller], roles[caller], http.StatusOK, audit.OutcomeAllowed
					if ep.act == auth.ActContainerStop {
						e.Error, e.Target = "reason: done", "container "+servertest.AliceTrain+" (alice-train)"
					}
					want = []audit.Event{e}
					if ep.act == auth.ActNodeDrain {
						// The store writes a drain's event with the drain,
						// in its transaction.
						want = nil
						if n := len(nodes.calls); n == 0 || !strings.HasPrefix(nodes.calls[n-1], "gpu-a ") {
							t.Errorf("drains %v, want gpu-a's", nodes.calls)
						}
					}
				}
				if diff := cmp.Diff(want, events); diff != "" {
					t.Errorf("audit events (-want +got):\n%s", diff)
				}
				// Only what was done is an action; refusals and reads are
				// observations.
				stopped := ep.act == auth.ActContainerStop && a.Status == http.StatusOK
				if len(acted) == 1 && acted[0] != stopped {
					t.Errorf("the event was an action: %v, want %v", acted[0], stopped)
				}
				if ep.act == auth.ActContainerStop {
					wantCalls := []servertest.StopCall(nil)
					if a.Status == http.StatusOK {
						wantCalls = []servertest.StopCall{{ID: servertest.AliceTrain, Grace: 10 * time.Second}}
					}
					if diff := cmp.Diff(wantCalls, f.Stopper.Take()); diff != "" {
						t.Errorf("stops (-want +got):\n%s", diff)
					}
				}
			})
		}
	}

	// whoami says who the token is.
	for caller, want := range map[string]apitype.Whoami{
		servertest.AsAdmin:  {User: "root", Role: "admin", Method: "token", Name: "root-laptop"},
		servertest.AsAlice:  {User: "alice", Role: "user", Method: "token", Name: "alice-laptop"},
		servertest.AsViewer: {User: "grafana", Role: "viewer", Method: "token", Name: "grafana"},
	} {
		var got apitype.Whoami
		f.Get(t, caller, "/api/v1/whoami").Decode(t, &got)
		if got != want {
			t.Errorf("whoami as %s = %+v, want %+v", caller, got, want)
		}
	}
}

// TestRateLimit: a caller past its burst gets 429 with Retry-After and
// the API's JSON error; every refusal is observed, for the audit log to
// sum.
func TestRateLimit(t *testing.T) {
	limiter := auth.NewLimiter(1, 2, 0)
	f := servertest.NewFixture(t, func(c *server.Config) { c.Limiter = func() *auth.Limiter { return limiter } })
	f.Audit.Take()

	for i := range 2 {
		if a := f.Get(t, servertest.AsAlice, "/api/v1/whoami"); a.Status != http.StatusOK {
			t.Fatalf("call %d: %d %s", i+1, a.Status, a.Body)
		}
	}
	limited := func(who string) {
		t.Helper()
		a := f.Get(t, servertest.AsAlice, "/api/v1/gpus")
		e := a.APIError(t, http.StatusTooManyRequests, apitype.CodeRateLimited)
		if got := a.Header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After %q, want 1", got)
		}
		if want := "too many requests from " + who + "; try again in 1 s"; e.Message != want {
			t.Errorf("message %q, want %q", e.Message, want)
		}
	}
	f.Audit.Take()
	limited("alice (token alice-laptop)")
	want := []audit.Event{{Time: f.Clock.Now(), Kind: audit.KindAPI, Caller: "alice (token alice-laptop)", Role: "user", Action: "gpus.read",
		Target: "GET /api/v1/gpus", Status: http.StatusTooManyRequests, Outcome: audit.OutcomeDenied, Error: "rate limited"}}
	if diff := cmp.Diff(want, eventsWithoutSource(t, f.Audit.Take())); diff != "" {
		t.Errorf("first refusal's audit events (-want +got):\n%s", diff)
	}
	limited("alice (token alice-laptop)")
	limited("alice (token alice-laptop)")
	if got := f.Audit.Take(); len(got) != 2 || got[0].Status != http.StatusTooManyRequests || got[1].Status != http.StatusTooManyRequests {
		t.Errorf("later refusals of the run: %+v, want each observed", got)
	}

	// Others have their own budget.
	if a := f.Get(t, servertest.AsBob, "/api/v1/whoami"); a.Status != http.StatusOK {
		t.Errorf("bob: %d %s", a.Status, a.Body)
	}

	// A second later alice has one call again; the refusal after it
	// starts a new run and is audited again.
	f.Clock.Advance(time.Second)
	if a := f.Get(t, servertest.AsAlice, "/api/v1/whoami"); a.Status != http.StatusOK {
		t.Errorf("alice after a second: %d %s", a.Status, a.Body)
	}
	f.Audit.Take()
	limited("alice (token alice-laptop)")
	if got := f.Audit.Take(); len(got) != 1 || got[0].Status != http.StatusTooManyRequests {
		t.Errorf("audit events of the second run: %+v, want one 429", got)
	}

	// Callers without credentials are limited by address, before their
	// credentials are looked at.
	f.Audit.Take()
	for range 2 {
		f.Get(t, servertest.AsNone, "/api/v1/whoami").APIError(t, http.StatusUnauthorized, auth.CodeNoCredentials)
	}
	a := f.Get(t, servertest.AsBad, "/api/v1/whoami")
	e := a.APIError(t, http.StatusTooManyRequests, apitype.CodeRateLimited)
	if e.Message != "too many requests from 127.0.0.1; try again in 1 s" {
		t.Errorf("message %q", e.Message)
	}
	events := f.Audit.Take()
	if len(events) != 3 || events[2].Status != http.StatusTooManyRequests || events[2].Caller != "unknown" {
		t.Errorf("audit events %+v, want two 401s and one 429", events)
	}
}

// TestStopBody: the body of a stop is one small JSON object; everything
// else is refused with a status and a message that say what is wrong, and
// audited as rejected.
func TestStopBody(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	path := "/api/v1/containers/alice-train/stop"
	tests := []struct {
		name, body, ctype string
		chunked           bool
		status            int
		code, msg         string
		grace             time.Duration // of the stop, when it is done
	}{
		{name: "no body", status: 200, grace: 10 * time.Second},
		{name: "empty object", body: `{}`, status: 200, grace: 10 * time.Second},
		{name: "timeout", body: `{"timeout":"30s","reason":"done"}`, status: 200, grace: 30 * time.Second},
		{name: "timeout zero", body: `{"timeout":"0s"}`, status: 200},
		{name: "timeout of ten minutes", body: `{"timeout":"10m"}`, status: 200, grace: 10 * time.Minute},
		{name: "content type with charset", body: `{}`, ctype: "application/json; charset=utf-8", status: 200, grace: 10 * time.Second},
		{name: "content type in capitals", body: `{}`, ctype: "Application/JSON", status: 200, grace: 10 * time.Second},
		{name: "no content type", body: `{}`, ctype: "-", status: 200, grace: 10 * time.Second},
		{name: "chunked", body: `{"timeout":"5s"}`, chunked: true, status: 200, grace: 5 * time.Second},

		{name: "too large", body: `{"reason":"` + strings.Repeat("x", 2000) + `"}`, status: 413, code: apitype.CodeBodyTooLarge, msg: "the body is larger than 1024 bytes (api.max_body)"},
		{name: "too large chunked", body: `{"reason":"` + strings.Repeat("x", 2000) + `"}`, chunked: true, status: 413, code: apitype.CodeBodyTooLarge, msg: "larger than 1024 bytes"},
		{name: "too large in trailing space", body: `{}` + strings.Repeat(" ", 2000), status: 413, code: apitype.CodeBodyTooLarge, msg: "larger than 1024 bytes"},
		{name: "unknown field", body: `{"force":true}`, status: 400, code: apitype.CodeBadRequest, msg: `the body has an unknown field "force"`},
		{name: "trailing object", body: `{}{}`, status: 400, code: apitype.CodeBadRequest, msg: "the body has more after its JSON object"},
		{name: "trailing garbage", body: `{"timeout":"1s"} x`, status: 400, code: apitype.CodeBadRequest, msg: "the body has more after its JSON object"},
		{name: "wrong type", body: `{"timeout":30}`, status: 400, code: apitype.CodeBadRequest, msg: `the body's field "timeout" must be a string, not a JSON number`},
		{name: "wrong type bool", body: `{"reason":true}`, status: 400, code: apitype.CodeBadRequest, msg: `the body's field "reason" must be a string, not a JSON bool`},
		{name: "an array", body: `["30s"]`, status: 400, code: apitype.CodeBadRequest, msg: "the body must be a JSON object, not a JSON array"},
		{name: "a string", body: `"30s"`, status: 400, code: apitype.CodeBadRequest, msg: "the body must be a JSON object, not a JSON string"},
		{name: "bad JSON", body: `{timeout:"30s"}`, status: 400, code: apitype.CodeBadRequest, msg: "the body is not valid JSON at byte 2"},
		{name: "cut short", body: `{"timeout":"30s"`, status: 400, code: apitype.CodeBadRequest, msg: "the body ends in the middle of its JSON"},
		{name: "bad timeout", body: `{"timeout":"soon"}`, status: 400, code: apitype.CodeBadRequest, msg: `timeout: "soon" is not a duration`},
		{name: "negative timeout", body: `{"timeout":"-5s"}`, status: 400, code: apitype.CodeBadRequest, msg: `timeout: "-5s" is negative`},
		{name: "long timeout", body: `{"timeout":"11m"}`, status: 400, code: apitype.CodeBadRequest, msg: "timeout: 11m is longer than 10m"},
		{name: "long reason", body: `{"reason":"` + strings.Repeat("x", 501) + `"}`, status: 400, code: apitype.CodeBadRequest, msg: "reason: 501 characters, more than 500"},
		// 500 characters of two bytes each are 500 characters.
		{name: "reason of 500 characters in 1000 bytes", body: `{"reason":"` + strings.Repeat("é", 500) + `"}`, status: 200, grace: 10 * time.Second},
		{name: "reason not UTF-8", body: "{\"reason\":\"stop \xff\"}", status: 400, code: apitype.CodeBadRequest, msg: "the body is not valid UTF-8"},
		{name: "a field twice", body: `{"timeout":"1s","reason":"x","timeout":"10m"}`, status: 400, code: apitype.CodeBadRequest, msg: `the body has the field "timeout" twice`},
		{name: "a field twice in another case", body: `{"timeout":"1s","TIMEOUT":"10m"}`, status: 400, code: apitype.CodeBadRequest, msg: `the body has the field "timeout" twice, as "timeout" and "TIMEOUT"`},
		{name: "a field twice in mixed case", body: `{"Reason":"a","timeout":"1s","rEASON":"b"}`, status: 400, code: apitype.CodeBadRequest, msg: `as "Reason" and "rEASON"`},
		{name: "a field twice by Unicode folding", body: "{\"reason\":\"a\",\"rea\u017fon\":\"b\"}", status: 400, code: apitype.CodeBadRequest, msg: `the body has the field "reason" twice`},
		{name: "a field in capitals alone", body: `{"TIMEOUT":"30s"}`, status: 200, grace: 30 * time.Second},
		{name: "text", body: `{}`, ctype: "text/plain", status: 415, code: apitype.CodeUnsupportedType, msg: "the body must be application/json, not text/plain"},
		{name: "form", body: `timeout=30s`, ctype: "application/x-www-form-urlencoded", status: 415, code: apitype.CodeUnsupportedType, msg: "not application/x-www-form-urlencoded"},
		{name: "a type that only starts like JSON", body: `{}`, ctype: "application/jsonl", status: 415, code: apitype.CodeUnsupportedType, msg: "not application/jsonl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
				if tt.chunked {
					body = struct{ io.Reader }{body} // of unknown length: sent chunked
				}
			}
			a := f.Do(t, servertest.AsAlice, http.MethodPost, path, body, tt.ctype)
			events := f.Audit.Take()
			calls := f.Stopper.Take()
			if tt.status == http.StatusOK {
				if a.Status != http.StatusOK {
					t.Fatalf("%d %s, want 200", a.Status, a.Body)
				}
				var got apitype.StopResponse
				a.Decode(t, &got)
				// How long it took is a benchmark's figure, not a test's:
				// only that the answer says a time.
				if got.Seconds < 0 {
					t.Errorf("answer %+v: the stop took %g s, want a time of 0 s or more", got, got.Seconds)
				}
				got.Seconds = 0
				if want := (apitype.StopResponse{ID: servertest.AliceTrain, Name: "alice-train", Stopped: true, Grace: tt.grace.String()}); got != want {
					t.Errorf("answer %+v, want %+v", got, want)
				}
				if diff := cmp.Diff([]servertest.StopCall{{ID: servertest.AliceTrain, Grace: tt.grace}}, calls); diff != "" {
					t.Errorf("stops (-want +got):\n%s", diff)
				}
				if len(events) != 1 || events[0].Outcome != audit.OutcomeAllowed {
					t.Errorf("audit events %+v, want one allowed", events)
				}
				return
			}
			e := a.APIError(t, tt.status, tt.code)
			if !strings.Contains(e.Message, tt.msg) {
				t.Errorf("message %q, want it to contain %q", e.Message, tt.msg)
			}
			if len(calls) != 0 {
				t.Errorf("the container was stopped: %+v", calls)
			}
			want := []audit.Event{{Time: f.Clock.Now(), Kind: audit.KindAPI, Caller: "alice (token alice-laptop)", Role: "user", Action: "containers.stop",
				Target: "container alice-train", Status: tt.status, Outcome: apitype.OutcomeRejected, Error: e.Message}}
			if diff := cmp.Diff(want, eventsWithoutSource(t, events)); diff != "" {
				t.Errorf("audit events (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("parameters", func(t *testing.T) {
		a := f.Do(t, servertest.AsAlice, http.MethodPost, path+"?timeout=30s", nil, "")
		e := a.APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
		if !strings.Contains(e.Message, "takes its options in a JSON body, not as parameters") {
			t.Errorf("message %q", e.Message)
		}
		if calls := f.Stopper.Take(); len(calls) != 0 {
			t.Errorf("the container was stopped: %+v", calls)
		}
		if events := f.Audit.Take(); len(events) != 1 || events[0].Outcome != apitype.OutcomeRejected {
			t.Errorf("audit events %+v, want one rejected", events)
		}
	})
}

// TestReadsTakeNoBody: a GET with a body is refused, whether its length is
// given or it is sent chunked, so that nobody believes the body did
// something.
func TestReadsTakeNoBody(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	for name, body := range map[string]func() io.Reader{
		"with a length": func() io.Reader { return strings.NewReader(`{"user":"bob"}`) },
		"chunked":       func() io.Reader { return struct{ io.Reader }{strings.NewReader(`{"user":"bob"}`)} },
	} {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{"/api/v1/whoami", "/api/v1/usage", "/api/v1/containers"} {
				a := f.Do(t, servertest.AsAlice, http.MethodGet, path, body(), "")
				if e := a.APIError(t, http.StatusBadRequest, apitype.CodeBadRequest); e.Message != "GET "+path+" takes no body" {
					t.Errorf("%s: message %q", path, e.Message)
				}
			}
		})
	}
	if a := f.Do(t, servertest.AsAlice, http.MethodGet, "/api/v1/whoami", http.NoBody, ""); a.Status != http.StatusOK {
		t.Errorf("a GET with an empty body: %d %s", a.Status, a.Body)
	}
}

func TestDecodeStrict(t *testing.T) {
	type nested struct {
		N     int               `json:"n"`
		B     bool              `json:"b"`
		L     []string          `json:"l"`
		M     map[string]string `json:"m"`
		Bytes []byte            `json:"bytes"`
		P     *float64          `json:"p"`
	}
	for _, tt := range []struct {
		body, want string
	}{
		{`{"n":"1"}`, `the body's field "n" must be a number, not a JSON string`},
		{`{"b":1}`, `the body's field "b" must be a boolean, not a JSON number`},
		{`{"l":{}}`, `the body's field "l" must be a array, not a JSON object`},
		{`{"m":[]}`, `the body's field "m" must be a object, not a JSON array`},
		{`{"bytes":1}`, `the body's field "bytes" must be a string, not a JSON number`},
		{`{"p":"x"}`, `the body's field "p" must be a number, not a JSON string`},
		{`{"n":1e400}`, `the body's field "n" must be a number, not a JSON number 1e400`},
		{`[1]`, "the body must be a JSON object, not a JSON array"},
		{`true`, "the body must be a JSON object, not a JSON bool"},
		{`{"bytes":"!!"}`, "the body is not what was expected: illegal base64 data at input byte 0"},
	} {
		var v nested
		err := server.DecodeStrict(strings.NewReader(tt.body), &v)
		if err == nil || err.Error() != tt.want {
			t.Errorf("DecodeStrict(%s) = %v, want %q", tt.body, err, tt.want)
		}
		if err != nil {
			servertest.CheckMessage(t, err.Error())
		}
	}
	for _, body := range []string{"", " \n", "null", `{}`, `{"n":1,"l":["a"],"p":null}`} {
		var v nested
		if err := server.DecodeStrict(strings.NewReader(body), &v); err != nil {
			t.Errorf("DecodeStrict(%q) = %v", body, err)
		}
	}
}

func FuzzDecodeStop(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `{"timeout":"30s","reason":"idle"}`, `{"timeout":"10m"}`, `{"timeout":"7d"}`,
		`{"timeout":"-1s"}`, `{"timeout":30}`, `[]`, `{"x":1}`, `{}{}`, `{"reason":"\ud800"}`, `{"timeout":"1d-1h"}`,
		`{"timeout":"1s","TIMEOUT":"2s"}`, "{\"reason\":\"a\",\"REA\u017fON\":\"b\"}", `{"Timeout":"1s"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req apitype.StopRequest
		if err := server.DecodeStrict(bytes.NewReader(body), &req); err != nil {
			if !strings.HasPrefix(err.Error(), "the body") {
				t.Errorf("DecodeStrict error %q does not speak of the body", err)
			}
			checkOwnWords(t, err.Error())
			return
		}
		grace, err := apitype.ParseStop(req)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "timeout: ") && !strings.HasPrefix(err.Error(), "reason: ") {
				t.Errorf("ParseStop error %q names no field", err)
			}
			return
		}
		if grace < 0 || grace > 10*time.Minute {
			t.Errorf("ParseStop(%+v) = %s, outside 0..10m", req, grace)
		}
		if req.Timeout == "" && grace != 10*time.Second {
			t.Errorf("no timeout gave a grace of %s, want 10s", grace)
		}
		if len(req.Reason) > 500 {
			t.Errorf("a reason of %d bytes was accepted", len(req.Reason))
		}
	})
}

// TestNewDefaultsLimits: a Config without limits still serves reports.
func TestNewDefaultsLimits(t *testing.T) {
	f := servertest.NewFixture(t, func(c *server.Config) { c.Limits = server.Limits{} })
	a := f.Get(t, servertest.AsAdmin, "/api/v1/usage?since=30d")
	if a.Status != http.StatusOK {
		t.Errorf("a 30-day report with default limits: %d %s", a.Status, a.Body)
	}
	big := fmt.Sprintf(`{"reason":"%s"}`, strings.Repeat("x", 400))
	if a := f.Do(t, servertest.AsAdmin, http.MethodPost, "/api/v1/containers/bob-train/stop", strings.NewReader(big), ""); a.Status != http.StatusOK {
		t.Errorf("a small stop with default limits: %d %s", a.Status, a.Body)
	}
}

// TestRateLimitAnonymousByAddress: anonymous viewers share no identity,
// so one of them using up its requests must not hold up the others.
func TestRateLimitAnonymousByAddress(t *testing.T) {
	authn, err := auth.New(auth.Config{Anonymous: config.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	limiter := auth.NewLimiter(1, 1, 0)
	h := server.New(server.Config{Ticks: nilTicks{}, Auth: func() *auth.Authenticator { return authn }, Limiter: func() *auth.Limiter { return limiter }})
	status := func(addr string) int {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/whoami", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, tt := range []struct {
		addr string
		want int
	}{{"192.0.2.1:1000", 200}, {"192.0.2.1:1001", 429}, {"192.0.2.2:1000", 200}} {
		if got := status(tt.addr); got != tt.want {
			t.Errorf("anonymous from %s: %d, want %d", tt.addr, got, tt.want)
		}
	}
}

// nilTicks has taken no sample yet.
type nilTicks struct{}

func (nilTicks) Latest() *sampler.Tick { return nil }
