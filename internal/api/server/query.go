package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// query parses r's query string and refuses what does not parse, naming
// the parameter. url.URL.Query drops such pairs without a word, so
// usage?by=user&user=alice%zz would report every user's rows to an admin
// who asked for alice's.
func query(r *http.Request) (url.Values, error) {
	v := url.Values{}
	for raw := r.URL.RawQuery; raw != ""; {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, val, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil || !utf8.ValidString(key) {
			return nil, fmt.Errorf("the query parameter %q is not valid in a URL: escape it", k)
		}
		if strings.Contains(pair, ";") {
			return nil, fmt.Errorf("%s: a ';' in the query must be escaped (%%3B); parameters are separated by '&'", key)
		}
		value, err := url.QueryUnescape(val)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not valid in a URL (%v)", key, val, err)
		}
		if !utf8.ValidString(value) {
			return nil, fmt.Errorf("%s: the value is not valid UTF-8", key)
		}
		v.Add(key, value)
	}
	return v, nil
}
