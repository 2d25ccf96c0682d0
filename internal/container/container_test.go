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

func TestJobOf(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   JobRef
		on     string // as node n1 names it
		ours   bool
	}{
		{"no job", map[string]string{"gpumeter.user": "alice"}, JobRef{}, "", false},
		{"our job", map[string]string{JobLabel: "j-000001", NodeLabel: "n1"}, JobRef{Node: "n1", ID: "j-000001"}, "j-000001", true},
		{"another node's job, same id", map[string]string{JobLabel: "j-000001", NodeLabel: "node2"}, JobRef{Node: "node2", ID: "j-000001"}, "node2/j-000001", false},
		{"no node label: ours", map[string]string{JobLabel: "j-000002"}, JobRef{Node: "n1", ID: "j-000002"}, "j-000002", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JobOf(tt.labels, "n1")
			if got != tt.want {
				t.Errorf("JobOf() = %+v, want %+v", got, tt.want)
			}
			if on := got.On("n1"); on != tt.on {
				t.Errorf("On(n1) = %q, want %q", on, tt.on)
			}
			if ours := got.Ours("n1"); ours != tt.ours {
				t.Errorf("Ours(n1) = %v, want %v", ours, tt.ours)
			}
			c := Container{Labels: tt.labels}
			if j := c.Job("n1"); j != got {
				t.Errorf("Container.Job() = %+v, want JobOf's %+v", j, got)
			}
		})
	}
}
