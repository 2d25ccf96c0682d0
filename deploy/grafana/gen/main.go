// Command gen writes gpumeter's Grafana dashboard, deploy/grafana/gpumeter.json,
// from the Go in this directory:
//
//	go run ./deploy/grafana/gen
//
// The test beside it fails when the committed file is not what gen writes.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("o", "deploy/grafana/gpumeter.json", "file to write")
	flag.Parse()
	b, err := render()
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// render is the dashboard as the committed file holds it: indented JSON
// with a final newline.
func render() ([]byte, error) {
	d, err := build()
	if err != nil {
		return nil, fmt.Errorf("build the dashboard: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("encode the dashboard: %w", err)
	}
	return buf.Bytes(), nil
}
