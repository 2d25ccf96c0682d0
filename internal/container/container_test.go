package container

import "testing"

func TestShortID(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"", ""},
		{"abc", "abc"},
		{"0123456789ab", "0123456789ab"},
		{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "0123456789ab"},
	} {
		if got := ShortID(tc.id); got != tc.want {
			t.Errorf("ShortID(%q) = %q, want %q", tc.id, got, tc.want)
		}
		c := Container{ID: tc.id}
		if got := c.ShortID(); got != tc.want {
			t.Errorf("Container{ID: %q}.ShortID() = %q, want %q", tc.id, got, tc.want)
		}
	}
}
