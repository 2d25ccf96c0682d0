package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// decodeJSON reads r's body into v: one JSON object, no unknown fields,
// nothing after it. A bad body is answered, and its status and error
// returned for the audit log.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			err := errors.New("the body must be application/json, not " + ct)
			writeError(w, http.StatusUnsupportedMediaType, apitype.CodeUnsupportedType, err.Error())
			return http.StatusUnsupportedMediaType, err
		}
	}
	err := DecodeStrict(r.Body, v)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		err = fmt.Errorf("the body is larger than %d bytes (api.max_body)", mbe.Limit)
		writeError(w, http.StatusRequestEntityTooLarge, apitype.CodeBodyTooLarge, err.Error())
		return http.StatusRequestEntityTooLarge, err
	case err != nil:
		writeError(w, http.StatusBadRequest, apitype.CodeBadRequest, err.Error())
		return http.StatusBadRequest, err
	}
	return http.StatusOK, nil
}

// DecodeStrict decodes one JSON value from rd into v, refusing unknown
// fields, a field given twice, text that is not UTF-8 and trailing data,
// with errors that say where the body is wrong. An empty body is an empty
// object. encoding/json alone would keep the last of two fields and turn
// invalid UTF-8 into U+FFFD, so an audit reason would not be what was sent.
func DecodeStrict(rd io.Reader, v any) error {
	data, err := io.ReadAll(rd)
	if err != nil {
		return err // a MaxBytesError, as the callers expect
	}
	if !utf8.Valid(data) {
		return errors.New("the body is not valid UTF-8")
	}
	if err := duplicateField(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &mbe):
			return err
		case errors.As(err, &syn):
			return fmt.Errorf("the body is not valid JSON at byte %d", syn.Offset)
		case errors.As(err, &typ) && typ.Field == "":
			return fmt.Errorf("the body must be a JSON %s, not a JSON %s", jsonType(typ.Type), typ.Value)
		case errors.As(err, &typ):
			return fmt.Errorf("the body's field %q must be a %s, not a JSON %s", typ.Field, jsonType(typ.Type), typ.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errors.New("the body ends in the middle of its JSON")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("the body has an unknown field %s", f)
		}
		return fmt.Errorf("the body is not what was expected: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return errors.New("the body has more after its JSON object")
	}
	return nil
}

// jsonType names the JSON type a Go type decodes from, so that an error
// speaks of the body and never of the server's Go types.
func jsonType(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return "string" // base64
		}
		return "array"
	}
	return "value"
}

// writeJSON answers with v as compact JSON: indenting costs more than
// encoding, and clients that show JSON to people indent it themselves.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// writeBody answers with a JSON body made before.
func writeBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apitype.Error{Code: code, Message: msg})
}

// duplicateField says which field an object of data names twice. Names
// are compared as encoding/json matches them to a struct's fields,
// without regard to case (image and IMAGE, or the Kelvin sign and k):
// the decoder would keep the last of the two, so a check of one and a
// use of the other could disagree. Data that is not JSON is left for the
// decoder, which words its errors for people.
func duplicateField(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var dup error
	var walk func() bool // false: stop, at a duplicate or bad JSON
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]string{} // folded name -> the name as sent
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := k.(string)
				folded := foldName(key)
				if first, ok := seen[folded]; ok {
					if first == key {
						dup = fmt.Errorf("the body has the field %q twice", key)
					} else {
						dup = fmt.Errorf("the body has the field %q twice, as %q and %q: field names match whatever their case", first, first, key)
					}
					return false
				}
				seen[folded] = key
				if !walk() {
					return false
				}
			}
		case json.Delim('['):
			for dec.More() {
				if !walk() {
					return false
				}
			}
		default:
			return true
		}
		_, err = dec.Token() // the closing delimiter
		return err == nil
	}
	walk()
	return dup
}

// foldName maps name to one representative of the names equal to it under
// simple Unicode case folding, the equality (bytes.EqualFold) by which
// encoding/json matches a key to a struct field: each rune becomes the
// smallest rune of its unicode.SimpleFold orbit.
func foldName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}
