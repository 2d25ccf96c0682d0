package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// TestWireAsDomain: each concept's wire shape encodes byte for byte as
// the domain value it is converted from, empty and with every field set:
// a field added to a domain type and not to its wire type, or not
// copied, fails here.
func TestWireAsDomain(t *testing.T) {
	t.Run("audit", func(t *testing.T) {
		for _, events := range [][]audit.Event{{{}}, filled[[]audit.Event](t)} {
			sameJSON(t, compact, events, AuditFromLog(events))
		}
	})
	t.Run("waste", func(t *testing.T) {
		for _, rep := range []*waste.Report{{}, {Findings: []waste.Finding{{}}}, filled[*waste.Report](t)} {
			sameJSON(t, compact, rep, WasteFromReport(rep))
		}
		if got := WasteFromReport(nil); got != nil {
			t.Errorf("WasteFromReport(nil) = %+v, want nil", got)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, rep := range []*report.Report{{}, {Rows: []report.Row{{Job: &report.JobInfo{}}}}, filled[*report.Report](t)} {
			var want bytes.Buffer
			if err := rep.WriteJSON(&want); err != nil {
				t.Fatal(err)
			}
			if got := indented(t, UsageFromReport(rep)); !bytes.Equal(got, want.Bytes()) {
				t.Errorf("on the wire:\n%s\nwant, as report.WriteJSON:\n%s", got, want.Bytes())
			}
		}
	})
}

// sameJSON fails when domain and wire encode differently.
func sameJSON(t *testing.T, enc func(*testing.T, any) []byte, domain, wire any) {
	t.Helper()
	if got, want := enc(t, wire), enc(t, domain); !bytes.Equal(got, want) {
		t.Errorf("on the wire:\n%s\nwant, as the domain's %T:\n%s", got, domain, want)
	}
}

func compact(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func indented(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// filled is a T with every exported field it reaches set to a value
// other than its zero, each field's its own: pointers point, slices hold
// two elements, maps one entry.
func filled[T any](t *testing.T) T {
	t.Helper()
	var v T
	n := 0
	fillValue(t, reflect.ValueOf(&v).Elem(), &n)
	return v
}

func fillValue(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillValue(t, v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 2, 10, 0, *n, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fillValue(t, f, n)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range v.Len() {
			fillValue(t, v.Index(i), n)
		}
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillValue(t, k, n)
		fillValue(t, e, n)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	default:
		t.Fatalf("fill: no value for a %s", v.Type())
	}
}
