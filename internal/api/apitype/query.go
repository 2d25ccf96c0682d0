package apitype

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// ParseQuery parses a query string and refuses what does not parse,
// naming the parameter. url.URL.Query drops such pairs without a word, so
// usage?by=user&user=alice%zz would report every user's rows to an admin
// who asked for alice's.
func ParseQuery(raw string) (url.Values, error) {
	v := url.Values{}
	for raw != "" {
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

// OnlyParams refuses a query parameter that is not one of names.
func OnlyParams(q map[string][]string, names ...string) error {
	for k := range q {
		known := false
		for _, n := range names {
			known = known || k == n
		}
		if !known {
			return fmt.Errorf("%s: not a parameter of this endpoint (it takes %s)", k, strings.Join(names, ", "))
		}
	}
	return nil
}

// FlagParam reads a boolean parameter: 1 or true, 0 or false, or absent.
func FlagParam(v, name string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, fmt.Errorf("%s: %q is not 1 or 0", name, v)
}
