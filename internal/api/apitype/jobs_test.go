package apitype

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

func TestParseJobRequest(t *testing.T) {
	tests := []struct {
		name  string
		req   JobRequest
		want  JobValues
		field string // "" for no error
	}{
		{"all set", JobRequest{TimeLimit: "1d12h", Memory: "32GiB", ShmSize: "512MiB", Notify: []string{"start", "end"}}, JobValues{TimeLimit: 36 * time.Hour, Memory: 32 << 30, ShmSize: 512 << 20}, ""},
		{"gpu memory", JobRequest{GPUMemory: "20GiB"}, JobValues{GPUMemory: 20 << 30}, ""},
		{"bad gpu memory", JobRequest{GPUMemory: "20G"}, JobValues{}, "gpu_memory"},
		{"zero gpu memory", JobRequest{GPUMemory: "0B"}, JobValues{}, "gpu_memory"},
		{"none set", JobRequest{}, JobValues{}, ""},
		{"bad duration", JobRequest{TimeLimit: "4 hours"}, JobValues{}, "time_limit"},
		{"zero duration", JobRequest{TimeLimit: "0s"}, JobValues{}, "time_limit"},
		{"negative duration", JobRequest{TimeLimit: "-1h"}, JobValues{}, "time_limit"},
		{"bad size", JobRequest{Memory: "32GB"}, JobValues{}, "memory"},
		{"zero shm", JobRequest{ShmSize: "0"}, JobValues{}, "shm_size"},
		{"bad notify", JobRequest{Notify: []string{"fail"}}, JobValues{}, "notify"},
		{"notify twice", JobRequest{Notify: []string{"end", "end"}}, JobValues{}, "notify"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseJobRequest(tt.req)
			if tt.field == "" {
				if err != nil || got != tt.want {
					t.Errorf("ParseJobRequest = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			fe, ok := err.(*FieldError)
			if !ok || fe.Field != tt.field || fe.Msg == "" {
				t.Errorf("error %v (%T), want a *FieldError for %s", err, err, tt.field)
			}
		})
	}
}

// TestREADMEListsJobCodes: every error code and refusal reason of the
// queue is in the README's list, for clients to test against.
func TestREADMEListsJobCodes(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	codes := []string{CodeQueueOff, CodeFairShareOff, CodeFleetOff, CodeNodeNotFound, CodeRefused, CodeConflict, CodeBadRequest, CodeLedgerUnavailable}
	for _, r := range spec.Reasons {
		codes = append(codes, string(r))
	}
	for _, c := range codes {
		if !strings.Contains(string(readme), "`"+c+"`") {
			t.Errorf("the README does not list %s", c)
		}
	}
}
