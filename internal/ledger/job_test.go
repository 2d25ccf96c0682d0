package ledger

import "testing"

func TestJobSeqAndTaskIDs(t *testing.T) {
	for _, tc := range []struct {
		id    string
		seq   int64
		ok    bool
		array string
		index int
		task  bool
	}{
		{"j-000123", 123, true, "", 0, false},
		{"j-000123_4", 123, true, "j-000123", 4, true},
		{"j-1234567_9999", 1234567, true, "j-1234567", 9999, true},
		{"j-000123_", 0, false, "", 0, false},
		{"j-000123_04", 0, false, "", 0, false},
		{"j-000123_-1", 0, false, "", 0, false},
		{"j-000123_4_5", 0, false, "", 0, false},
		{"x_4", 0, false, "", 0, false},
		{"j-000000_1", 0, false, "j-000000", 1, false},
	} {
		seq, ok := JobSeq(tc.id)
		if seq != tc.seq || ok != tc.ok {
			t.Errorf("JobSeq(%q) = %d, %v, want %d, %v", tc.id, seq, ok, tc.seq, tc.ok)
		}
		a, i, task := SplitArrayTaskID(tc.id)
		if task != tc.task || task && (a != tc.array || i != tc.index) {
			t.Errorf("SplitArrayTaskID(%q) = %q, %d, %v, want %q, %d, %v", tc.id, a, i, task, tc.array, tc.index, tc.task)
		}
		if task && ArrayTaskID(a, i) != tc.id {
			t.Errorf("ArrayTaskID(%q, %d) = %q, want %q", a, i, ArrayTaskID(a, i), tc.id)
		}
	}
}
