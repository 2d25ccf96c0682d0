package server

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// socketFixture serves the fixture's API on a real Unix socket, with the
// peer's uid read from the kernel as the agent does, and with uids the
// socket peers let in without a token.
func socketFixture(t *testing.T, uids []int) (*fixture, string) {
	t.Helper()
	f := newFixture(t, nil)
	secret, tok, err := auth.NewToken("alice-laptop", "alice", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	f.headers[asAlice] = "Bearer " + secret
	authn, err := auth.New(auth.Config{Tokens: []config.Token{tok}, SocketUIDs: uids})
	if err != nil {
		t.Fatal(err)
	}
	ln, path := testenv.ListenUnix(t)
	srv := &http.Server{ConnContext: auth.ConnContext, Handler: New(Config{
		Ticks: fixtureSampler(), Stopper: f.stopper, Audit: f.audit, Node: "n1",
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return nil },
		Limits:  Limits{MaxBodyBytes: 1 << 10, MaxAuditEvents: 50},
		Now:     f.clock.Now,
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f, path
}

// TestSocketPeerOverStaleToken: root (here, the test's own uid) on the
// socket is admin by its kernel identity even when it sends a token the
// agent does not accept; the answer says the token was ignored. A good
// token still decides, and a peer not admitted by its uid is refused.
func TestSocketPeerOverStaleToken(t *testing.T) {
	uid := os.Geteuid()
	f, path := socketFixture(t, []int{uid})
	want := "the token was ignored (the token is not accepted: it is wrong or has been removed): uid " + strconv.Itoa(uid) + " on the agent's socket is admin by its kernel identity"

	var answers []client.Answer
	stale := &client.Client{URL: "unix://" + path, Token: strings.TrimPrefix(f.headers[asBad], "Bearer "), Answered: func(a client.Answer) { answers = append(answers, a) }}
	me, err := stale.Whoami(context.Background())
	if err != nil {
		t.Fatalf("whoami with a stale token over the socket: %v", err)
	}
	if wantMe := (apitype.Whoami{User: "uid:" + strconv.Itoa(uid), Role: "admin", Method: "socket", Name: "uid " + strconv.Itoa(uid)}); me != wantMe {
		t.Errorf("whoami: %+v, want %+v", me, wantMe)
	}
	// A stop goes through as the socket's admin, and is audited as such.
	if _, err := stale.Stop(context.Background(), "alice-train", apitype.StopRequest{}); err != nil {
		t.Fatalf("stop with a stale token over the socket: %v", err)
	}
	if diff := cmp.Diff([]client.Answer{{Status: 200, Node: "n1", Warnings: []string{want}}, {Status: 200, Node: "n1", Warnings: []string{want}}}, answers); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	// The whoami is a read, observed; the stop is the one action.
	all, acted := f.audit.takeActed()
	var events []audit.Event
	for i, e := range all {
		if acted[i] {
			events = append(events, e)
		}
	}
	if len(events) != 1 || events[0].Caller != "uid:"+strconv.Itoa(uid)+" (socket uid "+strconv.Itoa(uid)+")" || events[0].Role != "admin" || events[0].Status != 200 {
		t.Errorf("audit events %+v, want the stop by the socket's admin", events)
	}

	answers = nil
	good := &client.Client{URL: "unix://" + path, Token: strings.TrimPrefix(f.headers[asAlice], "Bearer "), Answered: func(a client.Answer) { answers = append(answers, a) }}
	if me, err := good.Whoami(context.Background()); err != nil || me.User != "alice" {
		t.Errorf("whoami with alice's token over the socket: %+v, %v; want alice", me, err)
	}
	if diff := cmp.Diff([]client.Answer{{Status: 200, Node: "n1"}}, answers); diff != "" {
		t.Errorf("a good token: answers (-want +got):\n%s", diff)
	}
}

func TestSocketStrangerStaleToken(t *testing.T) {
	f, path := socketFixture(t, []int{os.Geteuid() + 1})
	var answers []client.Answer
	c := &client.Client{URL: "unix://" + path, Token: strings.TrimPrefix(f.headers[asBad], "Bearer "), Answered: func(a client.Answer) { answers = append(answers, a) }}
	_, err := c.Whoami(context.Background())
	if !client.IsUnauthorized(err) || !strings.Contains(err.Error(), "the token is not accepted") {
		t.Errorf("a stale token from a peer not admitted by its uid: err %v, want 401 bad token", err)
	}
	// A refusal names no node and warns of nothing.
	if diff := cmp.Diff([]client.Answer{{Status: 401}}, answers); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
}
