package sqlite

import "context"

// HoldsSole reports whether the store holds its last batch's rows as all
// the minute tables hold, for the next compaction.
func HoldsSole(s *Store) bool {
	if err := s.lock(context.Background()); err != nil {
		return false
	}
	defer func() { <-s.wsem }()
	return s.sole != nil
}
