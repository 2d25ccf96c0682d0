package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

const committed = "../gpumeter.json"

// TestCommittedIsCurrent fails when deploy/grafana/gpumeter.json is not
// what gen writes now: run `go run ./deploy/grafana/gen` and commit it.
func TestCommittedIsCurrent(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run `go run ./deploy/grafana/gen` from the repository root and commit the file", committed)
	}
}

// TestCommittedDecodesStrictly reads the committed file back into the
// SDK's dashboard type, refusing unknown fields and wrong types, and
// checks what an operator relies on: the variables and that every panel
// but the rows queries the data source variable.
func TestCommittedDecodesStrictly(t *testing.T) {
	raw, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if err := strictDecode(raw); err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	// The strict decoder of SDK v0.0.22 drops panels that decode without
	// error (it returns its empty error list as a non-nil error), so the
	// content is read with the lenient one.
	var d dashboard.Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if want := []string{"datasource", "Hostname", "gpu", "user", "team", "container"}; !slices.Equal(vars, want) {
		t.Errorf("variables = %v, want %v", vars, want)
	}
	panels := 0
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue // a row
		}
		panels++
		title := ""
		if p.Panel.Title != nil {
			title = *p.Panel.Title
		}
		if len(p.Panel.Targets) == 0 {
			t.Errorf("panel %q has no query", title)
		}
		if p.Panel.Datasource == nil || p.Panel.Datasource.Uid == nil || *p.Panel.Datasource.Uid != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", title)
		}
	}
	if panels < 25 {
		t.Errorf("%d panels, want the 25 or more the issue lists", panels)
	}
}

// strictDecode decodes raw into the SDK's dashboard type, refusing
// unknown fields and wrong types anywhere in it.
func strictDecode(raw []byte) error {
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	err := d.UnmarshalJSONStrict(raw)
	// The SDK returns its error list typed even when it is empty.
	if be, ok := err.(cog.BuildErrors); ok && len(be) == 0 {
		return nil
	}
	return err
}

// TestStrictDecodeRefuses shows the strict decode above can fail: a field
// the schema lacks, in a panel's options and in a query, is refused.
func TestStrictDecodeRefuses(t *testing.T) {
	raw, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ old, new string }{
		{`"graphMode": "none"`, `"graphMode": "none", "bogusOption": 1`},
		{`"instant": true`, `"instant": true, "bogusQueryField": 1`},
		{`"refresh": "30s"`, `"refresh": 30`},
	} {
		mod := bytes.Replace(raw, []byte(bad.old), []byte(bad.new), 1)
		if bytes.Equal(mod, raw) {
			t.Fatalf("%s is not in the file", bad.old)
		}
		if err := strictDecode(mod); err == nil {
			t.Errorf("strict decode accepted %s", bad.new)
		}
	}
}
