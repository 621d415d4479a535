// Lists every exported identifier of the Go packages given as directories,
// read by go/doc (what `go doc` and pkg.go.dev show), one JSON object a line:
// {"name": "Limiter.Check", "doc": "<first sentence of its doc comment>"}.
// Exported consts, vars, funcs, types, methods and struct fields are listed;
// an item without a doc comment has "doc": "" (tests/docs/api_reference.py
// fails on it). Run from the repository root: go run tests/docs/godoc.go bindings-go.
package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
)

type item struct {
	Name string `json:"name"`
	Doc  string `json:"doc"`
}

func main() {
	out := json.NewEncoder(os.Stdout)
	for _, dir := range os.Args[1:] {
		if err := list(dir, out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func list(dir string, out *json.Encoder) error {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return err
	}
	for _, files := range pkgs {
		if files.Name == "main" {
			continue // a command, not an API
		}
		p, err := doc.NewFromFiles(fset, mapValues(files.Files), "example.com/"+dir)
		if err != nil {
			return err
		}
		prefix := ""
		if dir != os.Args[1] {
			prefix = files.Name + "."
		}
		emit := func(name, text string) {
			out.Encode(item{prefix + name, p.Synopsis(text)})
		}
		values := func(vs []*doc.Value) {
			for _, v := range vs {
				for _, spec := range v.Decl.Specs {
					vs := spec.(*ast.ValueSpec)
					for _, n := range vs.Names {
						if !n.IsExported() {
							continue
						}
						// a group's comment documents each name in it
						text := v.Doc
						if vs.Doc != nil {
							text = vs.Doc.Text()
						} else if vs.Comment != nil {
							text = vs.Comment.Text()
						}
						emit(n.Name, text)
					}
				}
			}
		}
		values(p.Consts)
		values(p.Vars)
		for _, f := range p.Funcs {
			emit(f.Name, f.Doc)
		}
		for _, t := range p.Types {
			emit(t.Name, t.Doc)
			values(t.Consts)
			values(t.Vars)
			for _, f := range t.Funcs {
				emit(f.Name, f.Doc)
			}
			for _, m := range t.Methods {
				emit(t.Name+"."+m.Name, m.Doc)
			}
			for _, spec := range t.Decl.Specs {
				st, ok := spec.(*ast.TypeSpec).Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, f := range st.Fields.List {
					text := ""
					if f.Doc != nil {
						text = f.Doc.Text()
					} else if f.Comment != nil {
						text = f.Comment.Text()
					}
					for _, n := range f.Names {
						if n.IsExported() {
							emit(t.Name+"."+n.Name, text)
						}
					}
				}
			}
		}
	}
	return nil
}

func mapValues(m map[string]*ast.File) []*ast.File {
	files := make([]*ast.File, 0, len(m))
	for _, f := range m {
		files = append(files, f)
	}
	return files
}
