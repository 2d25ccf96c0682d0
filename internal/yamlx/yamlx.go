// Package yamlx reads YAML the one strict way gpumeter's files are read
// (the agent's config, the client config, scenarios): one document to a
// file, syntax errors placed on the line they are on, and kinds of node
// named for messages. What the keys of a file mean stays with the package
// that reads it.
package yamlx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// SyntaxError is YAML that does not parse.
type SyntaxError struct {
	// ParserLine is the line the parser names, which is where the
	// construct it was reading began (a mapping lines above a stray
	// key), or, where it names none, the line of the first character
	// YAML does not allow; 1 for the first line.
	ParserLine int
	// Msg says what is wrong, as the parser words it, without the
	// "yaml: line N: " in front.
	Msg string
	// Err is the parser's error.
	Err error

	data []byte // the file, for Line
}

// Line returns the line the problem is on: the first line at which the
// file, cut after it, fails the same way; ParserLine when none does, or
// when the file is too long to look (each line tried costs a parse of
// what comes before it).
func (e *SyntaxError) Line() int {
	if bytes.Count(e.data, []byte("\n")) > maxSyntaxLines {
		return e.ParserLine
	}
	end := 0
	for n := 1; end < len(e.data); n++ {
		i := bytes.IndexByte(e.data[end:], '\n')
		if i < 0 {
			end = len(e.data)
		} else {
			end += i + 1
		}
		if err := parse(e.data[:end]); err != nil && strings.HasSuffix(err.Error(), e.Msg) {
			return n
		}
	}
	return e.ParserLine
}

// parse is the parser's error for the first document of data; what the
// parser throws instead counts as no error.
func parse(data []byte) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	var doc yaml.Node
	return yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc)
}

// Error renders e as "line N: message", N from Line.
func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line(), e.Msg) }

func (e *SyntaxError) Unwrap() error { return e.Err }

// SecondDocumentError is a second YAML document after the first: a file
// holds one.
type SecondDocumentError struct {
	Line int // where the second document starts
}

func (e *SecondDocumentError) Error() string {
	return fmt.Sprintf("line %d: a second YAML document; the file holds one", e.Line)
}

// Document returns the root node of the one YAML document data holds: nil
// when it holds none (no bytes, or only comments). A document that is
// only a null ("~", or a key-less "---") comes back as that null node:
// IsNull tells. It refuses a second document with a *SecondDocumentError
// and YAML that does not parse with a *SyntaxError.
func Document(data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The YAML library reports its own failures as errors; anything
		// else it throws is still a file it could not read, not a reason
		// to stop.
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("cannot read YAML: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(err, data)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(err, data)
	default:
		return nil, &SecondDocumentError{Line: next.Line}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// IsNull reports whether n is a null scalar: "~", "null", or no value.
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// Kind names the kind of n for a message such as "want a mapping, got a
// list": "a mapping", "a list", "an alias", "nothing" for a null, the
// value in quotes for any other scalar, and "a document".
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if IsNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	default:
		return "a document"
	}
}

var parserLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxSyntaxLines bounds the files whose syntax errors Line looks for line
// by line.
const maxSyntaxLines = 5000

// syntaxError is err, which the parser gave for data, with the line the
// parser names: none for a problem on the first line, nor for a
// character YAML does not allow, which it finds itself.
func syntaxError(err error, data []byte) *SyntaxError {
	e := &SyntaxError{Msg: strings.TrimPrefix(err.Error(), "yaml: "), Err: err, data: data}
	if m := parserLine.FindStringSubmatch(err.Error()); m != nil {
		e.ParserLine, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	if e.ParserLine == 0 {
		e.ParserLine = badCharLine(data)
	}
	return e
}

// badCharLine is the line of the first character YAML does not allow, or
// 1 when there is none.
func badCharLine(data []byte) int {
	line := 1
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		switch {
		case r == '\n':
			line++
		case r == utf8.RuneError && n <= 1,
			r < 0x20 && r != '\t' && r != '\r',
			r >= 0x7f && r <= 0x9f && r != 0x85,
			r >= 0xd800 && r <= 0xdfff, r == 0xfffe, r == 0xffff:
			return line
		}
		data = data[n:]
	}
	return 1
}
