package locks

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The package's files form a layering: none uses a declaration of a file
// that uses one of its own back, directly or through others. Read from
// the sources with the type checker: a file uses another when it names
// something (a function, type, variable, field or method) declared there.
func TestTheFilesFormALayering(t *testing.T) {
	graph := fileGraph(t)
	if len(graph) < 10 {
		t.Fatalf("only %d files read", len(graph))
	}
	state := map[string]int{} // 1: on the path, 2: done
	var path []string
	var visit func(f string)
	visit = func(f string) {
		state[f] = 1
		path = append(path, f)
		for _, g := range graph[f] {
			switch state[g] {
			case 1:
				at := 0
				for path[at] != g {
					at++
				}
				t.Fatalf("the files use each other: %s -> %s", strings.Join(path[at:], " -> "), g)
			case 0:
				visit(g)
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
	}
	files := make([]string, 0, len(graph))
	for f := range graph {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if state[f] == 0 {
			visit(f)
		}
	}
}

// fileGraph maps each non-test file of the package to the files it uses.
func fileGraph(t *testing.T) map[string][]string {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	// The standard library's export data is quick to read; where this Go
	// has none, its sources do.
	conf := types.Config{Importer: importer.Default()}
	if _, err := conf.Check("holdline/clients/go/locks", fset, files, info); err != nil {
		info.Uses = map[*ast.Ident]types.Object{}
		conf.Importer = importer.ForCompiler(fset, "source", nil)
		if _, err := conf.Check("holdline/clients/go/locks", fset, files, info); err != nil {
			t.Fatal(err)
		}
	}
	edges := map[string]map[string]bool{}
	for _, f := range files {
		edges[filepath.Base(fset.File(f.Pos()).Name())] = map[string]bool{}
	}
	for id, obj := range info.Uses {
		if obj.Pkg() == nil || obj.Pkg().Path() != "holdline/clients/go/locks" || !obj.Pos().IsValid() {
			continue
		}
		from := filepath.Base(fset.File(id.Pos()).Name())
		to := filepath.Base(fset.File(obj.Pos()).Name())
		if from != to {
			edges[from][to] = true
		}
	}
	graph := map[string][]string{}
	for from, tos := range edges {
		graph[from] = nil
		for to := range tos {
			graph[from] = append(graph[from], to)
		}
		sort.Strings(graph[from])
	}
	return graph
}
