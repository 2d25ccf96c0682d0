package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

func (s *server) jobLogs(w http.ResponseWriter, r *http.Request, c *call) {
	if s.queueOff(w, r, c, false) {
		return
	}
	q, err := apitype.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = apitype.OnlyParams(q, "follow")
	}
	var follow bool
	if err == nil {
		follow, err = apitype.FlagParam(q.Get("follow"), "follow")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return
	}
	job, ok := s.ownJob(w, r, c)
	if !ok {
		return
	}
	if s.forwards(r, job) {
		s.forward(w, r, c, job, nil)
		return
	}
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), window: writeWindow(r)}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	err = s.cfg.Jobs.Logs(r.Context(), job.ID, follow, sw)
	switch {
	case err != nil && !sw.wrote:
		w.Header().Del("Content-Type")
		s.jobError(w, r, c, "job "+job.ID, err)
	case err != nil && r.Context().Err() == nil:
		// The answer has begun: its status cannot change any more.
		s.cfg.Logger.Warn("job logs", "job", job.ID, "caller", c.id.Caller(), "err", err)
	case !sw.wrote:
		w.WriteHeader(http.StatusOK)
	}
}

// writeWindow is how long one write of a stream may take: the server's
// write timeout, which would otherwise count from the request and cut a
// follow that outlives it. 0: the server sets no timeout.
func writeWindow(r *http.Request) time.Duration {
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok {
		return srv.WriteTimeout
	}
	return 0
}

// streamWriter sends what it is given at once: before each write it moves
// the write deadline a window ahead, after it flushes. A follow can last
// as long as the job, and a client that stops reading is still cut off.
type streamWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	window time.Duration
	wrote  bool
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if s.window > 0 {
		if err := s.rc.SetWriteDeadline(time.Now().Add(s.window)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return 0, err
		}
	}
	s.wrote = true
	n, err := s.w.Write(p)
	if err != nil {
		return n, err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return n, err
	}
	return n, nil
}
