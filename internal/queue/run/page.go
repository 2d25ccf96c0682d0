package run

import (
	"context"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// CountJobs counts the jobs Jobs would return for f without its Limit
// and After: the total of a page of them.
func (q *Service) CountJobs(ctx context.Context, f ledger.JobFilter) (int, error) {
	for _, s := range f.States {
		if _, err := queue.ParseState(string(s)); err != nil {
			return 0, &BadRequest{Field: "state", Text: err.Error()}
		}
	}
	if len(f.States) > 0 {
		f.IncludeEnded = true // as Jobs takes them
	}
	return q.store.CountJobs(ctx, f)
}
