package yamlx

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestDocument(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		kind     yaml.Kind // of the root; 0 for none
		null     bool
	}{
		{"no bytes", "", 0, false},
		{"only comments", "# nothing here\n", 0, false},
		{"null", "~\n", yaml.ScalarNode, true},
		{"bare document marker", "---\n", yaml.ScalarNode, true},
		{"mapping", "a: 1\nb: [2]\n", yaml.MappingNode, false},
		{"list", "- 1\n", yaml.SequenceNode, false},
		{"one document with its end marker", "a: 1\n...\n", yaml.MappingNode, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := Document([]byte(tc.in))
			if err != nil {
				t.Fatalf("Document(%q) = %v", tc.in, err)
			}
			if tc.kind == 0 {
				if root != nil {
					t.Fatalf("Document(%q) = a node of kind %v, want none", tc.in, root.Kind)
				}
				return
			}
			if root == nil || root.Kind != tc.kind {
				t.Fatalf("Document(%q) = %+v, want a node of kind %v", tc.in, root, tc.kind)
			}
			if got := IsNull(root); got != tc.null {
				t.Errorf("IsNull(Document(%q)) = %v, want %v", tc.in, got, tc.null)
			}
		})
	}
}

func TestDocumentSecond(t *testing.T) {
	_, err := Document([]byte("a: 1\n---\nb: 2\n"))
	var second *SecondDocumentError
	if !errors.As(err, &second) {
		t.Fatalf("Document of two documents = %v, want a *SecondDocumentError", err)
	}
	if second.Line != 2 {
		t.Errorf("second document at line %d, want 2, its marker's", second.Line)
	}
	if want := "line 2: a second YAML document; the file holds one"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestDocumentSyntax(t *testing.T) {
	for _, tc := range []struct {
		name, in         string
		line, parserLine int
		msg              string
	}{
		// The parser names line 4, where the mapping it was reading
		// began; the stray key is on line 5.
		{"stray key", "listen: :1\ninterval: 1s\ndocker:\n  host: x\n bad: 1\n", 5, 4, "did not find expected key"},
		// The parser names no line for the first one.
		{"first line", "listen: a: b\n", 1, 1, "mapping values are not allowed in this context"},
		{"unterminated", "listen: :1\nhostname: \"unterminated\n", 2, 2, "found unexpected end of stream"},
		// Nor for a character YAML does not allow.
		{"control character", "listen: :1\ninterval: 1s\nhostname: a\x01b\n", 3, 3, "control characters are not allowed"},
		{"bad UTF-8", "a: 1\nb: \xff\n", 2, 2, "invalid leading UTF-8 octet"},
		{"in the second document", "a: 1\n---\nb: [\n", 3, 3, "did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Document([]byte(tc.in))
			var syntax *SyntaxError
			if !errors.As(err, &syntax) {
				t.Fatalf("Document(%q) = %v, want a *SyntaxError", tc.in, err)
			}
			if syntax.Line() != tc.line || syntax.ParserLine != tc.parserLine || !strings.Contains(syntax.Msg, tc.msg) {
				t.Errorf("Document(%q) = line %d, parser line %d, %q; want %d, %d, %q", tc.in, syntax.Line(), syntax.ParserLine, syntax.Msg, tc.line, tc.parserLine, tc.msg)
			}
			if syntax.Unwrap() == nil || !strings.HasPrefix(syntax.Unwrap().Error(), "yaml: ") {
				t.Errorf("Unwrap() = %v, want the parser's error", syntax.Unwrap())
			}
		})
	}
}

func TestKind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{a: 1}", "a mapping"},
		{"[1]", "a list"},
		{"~", "nothing"},
		{"", "nothing"},
		{"5", `"5"`},
		{`"x y"`, `"x y"`},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte("v: "+tc.in), &doc); err != nil {
			t.Fatal(err)
		}
		if got := Kind(doc.Content[0].Content[1]); got != tc.want {
			t.Errorf("Kind(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := Kind(&yaml.Node{Kind: yaml.AliasNode}); got != "an alias" {
		t.Errorf("Kind(alias) = %s, want an alias", got)
	}
	if got := Kind(&yaml.Node{Kind: yaml.DocumentNode}); got != "a document" {
		t.Errorf("Kind(document) = %s, want a document", got)
	}
}

func FuzzDocument(f *testing.F) {
	for _, s := range []string{"", "a: 1\n", "a: 1\n---\nb: 2\n", "a: [\n", "a: \x01\n", "&a [*a]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := Document(data)
		if err != nil && root != nil {
			t.Fatalf("Document(%q) returned both a node and %v", data, err)
		}
		var syntax *SyntaxError
		if errors.As(err, &syntax) && (syntax.Line() < 1 || syntax.ParserLine < 1) {
			t.Fatalf("Document(%q) = %v: line %d, parser line %d", data, err, syntax.Line(), syntax.ParserLine)
		}
	})
}
