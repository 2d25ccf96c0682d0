// Command binsize says what each module costs in a gpumeter binary: the
// bytes of its symbols in the code (.text), the read-only data (.rodata,
// type data, strings), the initialised data (.data, .noptrdata) and the
// zero-filled data (.bss, .noptrbss), summed by module from the binary's
// symbol table, as `go tool nm -size` lists them.
//
//	go build -o /tmp/gpumeter ./cmd/gpumeter && go run ./scripts/binsize /tmp/gpumeter
//
// The function tables (.gopclntab, which the runtime reads for stack
// traces, stack maps and the GC) are one block; they are shared out over
// the modules in proportion to their code, an estimate. Type descriptors
// and strings have no symbol of their own: they are one row, so that the
// sums are the sections' sizes. "file" is what a
// module adds to the mapped file: code, read-only data, initialised data
// and its share of the tables; zero-filled data costs only what is
// written at run time. A module is marked "serve" when `gpumeter serve`
// needs it: when ./internal/agent or the command's own packages import
// it; the others are there for other subcommands (top, the completions).
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: binsize BINARY")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

// kinds of section a symbol lies in.
const (
	text = iota
	rodata
	data
	bss
	nkinds
)

var sectionKind = map[string]int{
	".text": text, ".rodata": rodata, ".typelink": rodata, ".itablink": rodata,
	".data": data, ".noptrdata": data, ".go.buildinfo": data,
	".bss": bss, ".noptrbss": bss,
}

type row struct {
	module string
	size   [nkinds]uint64
	pcln   uint64
	serve  bool
}

func (r *row) file() uint64 { return r.size[text] + r.size[rodata] + r.size[data] + r.pcln }

func run(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return err
	}
	mods, err := modules("./cmd/gpumeter")
	if err != nil {
		return err
	}
	serveMods, err := modules("./internal/agent")
	if err != nil {
		return err
	}
	rows := map[string]*row{}
	get := func(m string) *row {
		r := rows[m]
		if r == nil {
			r = &row{module: m}
			rows[m] = r
		}
		return r
	}
	var pcln uint64
	if s := f.Section(".gopclntab"); s != nil {
		pcln = s.Size
	}
	for _, s := range syms {
		if int(s.Section) >= len(f.Sections) || s.Section == elf.SHN_UNDEF {
			continue
		}
		k, ok := sectionKind[f.Sections[s.Section].Name]
		if !ok || s.Size == 0 {
			continue
		}
		get(moduleOf(mods, packageOf(s.Name))).size[k] += s.Size
	}
	// What the symbol table leaves out (type descriptors, strings and
	// other linker-made data) is one row, so that the sums are the
	// sections' sizes.
	var sect, attributed [nkinds]uint64
	for _, s := range f.Sections {
		if k, ok := sectionKind[s.Name]; ok {
			sect[k] += s.Size
		}
	}
	for _, r := range rows {
		for k := range nkinds {
			attributed[k] += r.size[k]
		}
	}
	rest := get("(no symbol: type data, strings, padding)")
	for k := range nkinds {
		if sect[k] > attributed[k] {
			rest.size[k] = sect[k] - attributed[k]
		}
	}
	var code uint64
	for _, r := range rows {
		if r != rest {
			code += r.size[text]
		}
	}
	for _, r := range rows {
		if r == rest {
			continue
		}
		r.pcln = pcln * r.size[text] / max(code, 1)
		_, r.serve = serveMods[r.module]
	}
	for _, m := range []string{"std", "runtime tables", rest.module, "github.com/gpumeter/gpumeter", "github.com/spf13/cobra", "github.com/spf13/pflag"} {
		if r := rows[m]; r != nil {
			r.serve = true // the command line itself
		}
	}
	list := make([]*row, 0, len(rows))
	for _, r := range rows {
		list = append(list, r)
	}
	slices.SortFunc(list, func(a, b *row) int { return cmp.Compare(b.file(), a.file()) })

	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	kib := func(n uint64) string { return fmt.Sprintf("%.0f", float64(n)/1024) }
	fmt.Fprintln(w, "| module | file KiB | text | rodata | data | pclntab (est.) | bss | serve |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|")
	var tot row
	for _, r := range list {
		serve := "-"
		if r.serve {
			serve = "serve"
		}
		if r.file() < 1024 && r.size[bss] < 1024 {
			continue // under 1 KiB: left out of the table, counted in the sums
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.module, kib(r.file()), kib(r.size[text]), kib(r.size[rodata]), kib(r.size[data]), kib(r.pcln), kib(r.size[bss]), serve)
		for k := range nkinds {
			tot.size[k] += r.size[k]
		}
		tot.pcln += r.pcln
	}
	fmt.Fprintf(w, "| all (%d modules) | %s | %s | %s | %s | %s | %s | |\n", len(list)-1, kib(tot.file()), kib(tot.size[text]), kib(tot.size[rodata]), kib(tot.size[data]), kib(tot.pcln), kib(tot.size[bss]))
	var sects []string
	for _, s := range f.Sections {
		if _, ok := sectionKind[s.Name]; ok || s.Name == ".gopclntab" {
			sects = append(sects, fmt.Sprintf("%s %s", s.Name, kib(s.Size)))
		}
	}
	fmt.Fprintf(w, "\nsections (KiB): %s\n", strings.Join(sects, ", "))
	return nil
}

// modules maps every package that pkg needs to its module path; the
// standard library, and its vendored golang.org/x copies, to "std".
func modules(pkg string) (map[string]string, error) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if .Module}}{{.Module.Path}}{{else}}std{{end}}", pkg).Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w", pkg, err)
	}
	m := map[string]string{}
	for l := range bytes.Lines(out) {
		p, mod, _ := strings.Cut(strings.TrimSpace(string(l)), " ")
		m[p] = mod
		m[mod] = mod
	}
	return m, nil
}

// moduleOf finds the module of a package path by its longest known prefix.
func moduleOf(mods map[string]string, pkg string) string {
	switch {
	case pkg == "":
		return "runtime tables" // the linker's own: go:func.*, strings, findfunctab
	case strings.HasPrefix(pkg, "vendor/"):
		return "std"
	}
	for p := pkg; ; {
		if m, ok := mods[p]; ok {
			return m
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	if !strings.Contains(pkg, ".") {
		return "std"
	}
	return "other"
}

// packageOf returns the import path of the package a Go symbol belongs
// to: "github.com/a/b" for "github.com/a/b.(*T).M", "type:*github.com/a/b.T"
// or "go:itab.*github.com/a/b.T,io.Writer"; "" when the name has none.
func packageOf(s string) string {
	for _, p := range []string{"go:itab.", "type:.eq.", "type:.hash.", "type:.namedata.", "type:.importpath.", "type:", "go:string.", "go:func."} {
		if strings.HasPrefix(s, p) {
			s = s[len(p):]
			break
		}
	}
	for {
		t := strings.TrimLeft(s, "*[]0123456789")
		t = strings.TrimPrefix(t, "noalg.")
		t = strings.TrimPrefix(t, "chan ")
		if strings.HasPrefix(t, "map[") {
			if i := strings.IndexByte(t, ']'); i > 0 {
				t = t[i+1:]
			}
		}
		if t == s {
			break
		}
		s = t
	}
	end := strings.IndexAny(s, "([,; ")
	if end < 0 {
		end = len(s)
	}
	last := strings.LastIndexByte(s[:end], '/')
	dot := strings.IndexByte(s[last+1:], '.')
	if dot <= 0 {
		return ""
	}
	return s[:last+1+dot]
}
