package testrules

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The rules, over every _test.go file of the repository (every module):
//
//  1. No literal date from 2000 to 3000 outside Example functions:
//     time.Date with such a year, time.Unix/UnixMilli/UnixMicro of such an
//     instant, time.Parse of a literal, or a bare 10- or 13-digit number in
//     that range (a hard-coded lock value). A date near real time is a time
//     bomb: a test that mixes it with real time passes until the day the
//     real date crosses it (issue 10). Clocks start at time.Now(); parsing
//     tables use instants before 2000.
//  2. An Example may start a ManualClock at a literal date, for stable
//     output, only if every Locker it builds takes a clock (WithClock):
//     then nothing in it runs on real time, since each Example has an
//     embedded server of its own.
//  3. Every wait has a deadline: no bare receive (<-ch) outside a select,
//     no select without a timer, a deadline or a default, no Wait() on a
//     WaitGroup or a process, and no Acquire under context.Background().
//     Use internal/await. A wait that is bounded by construction says why
//     in a comment on its line that starts "bounded:".

// Literal dates from dateFloor (2000-01-01T00:00:00Z) to dateCeiling
// (3000-01-01T00:00:00Z), in Unix seconds, are near real time: a test may
// pass on one side of such a date and fail on the other.
const (
	dateFloor   = 946684800
	dateCeiling = 32503680000
)

func nearRealTime(unixSeconds int64) bool {
	return dateFloor <= unixSeconds && unixSeconds < dateCeiling
}

type finding struct {
	pos  token.Position
	rule string
}

func TestNoTestHoldsADateNearRealTime(t *testing.T) {
	report(t, check(t, "date"))
}

func TestEveryWaitInATestHasADeadline(t *testing.T) {
	report(t, check(t, "wait"))
}

// The checks can fail: a file with each kind of fault is caught.
func TestTheRulesCatchWhatTheyForbid(t *testing.T) {
	src := `package x
var epoch = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
func TestA(t *testing.T) {
	c := NewManualClock(time.UnixMilli(1795348800000))
	b.set(t, "k", "1795000000")
	f.Add(int64(1_795_000_000))
	<-done
	wg.Wait()
	select { case <-a: case <-b: }
	l.Acquire(context.Background(), "k")
	<-done // bounded: closed above
	select { case <-a: case <-time.After(time.Second): }
}
func ExampleB() {
	clock := NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := setnxlock.New(client)
}
func ExampleC() {
	clock := NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := setnxlock.New(client, setnxlock.WithClock(clock))
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, fd := range append(dateFindings(fset, f), waitFindings(fset, f, packageBackgrounds(f))...) {
		lines = append(lines, fd.pos.Line)
	}
	want := []int{2, 4, 5, 6, 15, 7, 8, 9, 10}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("findings on lines %v, want %v", lines, want)
	}
}

func report(t *testing.T, findings []finding) {
	t.Helper()
	for _, f := range findings {
		t.Errorf("%s: %s", f.pos, f.rule)
	}
}

// check parses every test file of the repository and applies one family
// of rules.
func check(t *testing.T, family string) []finding {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	type parsed struct {
		fset *token.FileSet
		file *ast.File
	}
	byDir := map[string][]parsed{}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, filepath.Join(root, "internal", "testrules")) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		files++
		byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], parsed{fset, f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("only %d test files found under %s: the walk is broken", files, root)
	}
	var all []finding
	for _, pkg := range byDir {
		background := map[string]bool{} // package-level contexts without a deadline
		for _, p := range pkg {
			for name := range packageBackgrounds(p.file) {
				background[name] = true
			}
		}
		for _, p := range pkg {
			var found []finding
			if family == "date" {
				found = dateFindings(p.fset, p.file)
			} else {
				found = waitFindings(p.fset, p.file, background)
			}
			for _, fd := range found {
				if rel, err := filepath.Rel(root, fd.pos.Filename); err == nil {
					fd.pos.Filename = rel
				}
				all = append(all, fd)
			}
		}
	}
	return all
}

// dateFindings applies rules 1 and 2.
func dateFindings(fset *token.FileSet, f *ast.File) []finding {
	var found []finding
	add := func(n ast.Node, rule string) { found = append(found, finding{fset.Position(n.Pos()), rule}) }
	inspect := func(n ast.Node, example bool) {
		var dated []ast.Node
		ast.Inspect(n, func(n ast.Node) bool {
			if isDateLiteral(n) {
				dated = append(dated, n)
				return false
			}
			return true
		})
		if len(dated) == 0 {
			return
		}
		if !example {
			for _, d := range dated {
				add(d, "a literal date from 2000 on: start clocks at time.Now() (rule 1)")
			}
			return
		}
		ast.Inspect(n, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && calls(call, "New") && !mentions(call, "WithClock") {
				add(dated[0], "an Example with a literal date builds a Locker on real time (rule 2)")
				return false
			}
			return true
		})
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		inspect(decl, ok && strings.HasPrefix(fn.Name.Name, "Example"))
	}
	return found
}

// isDateLiteral recognises a literal instant from 2000 on.
func isDateLiteral(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.CallExpr:
		sel, ok := n.Fun.(*ast.SelectorExpr)
		if !ok || !isIdent(sel.X, "time") || len(n.Args) == 0 {
			return false
		}
		v, isInt := intLiteral(n.Args[0])
		switch sel.Sel.Name {
		case "Date":
			return isInt && 2000 <= v && v < 3000
		case "Unix":
			return isInt && nearRealTime(v)
		case "UnixMilli":
			return isInt && nearRealTime(v/1e3)
		case "UnixMicro":
			return isInt && nearRealTime(v/1e6)
		case "Parse", "ParseInLocation":
			_, isString := n.Args[len(n.Args)-1].(*ast.BasicLit)
			return isString
		}
	case *ast.BasicLit:
		text := n.Value
		switch n.Kind {
		case token.STRING:
			text, _ = strconv.Unquote(n.Value)
		case token.INT:
			text = strings.ReplaceAll(text, "_", "") // 1_795_000_000
		}
		return holdsTimestamp(text)
	}
	return false
}

// holdsTimestamp reports whether text contains a run of 10 digits read as
// Unix seconds, or of 13 read as milliseconds, from 2000 on.
func holdsTimestamp(text string) bool {
	for i := 0; i < len(text); {
		j := i
		for j < len(text) && '0' <= text[j] && text[j] <= '9' {
			j++
		}
		if j == i {
			i++
			continue
		}
		if v, err := strconv.ParseInt(text[i:j], 10, 64); err == nil {
			if j-i == 10 && nearRealTime(v) || j-i == 13 && nearRealTime(v/1e3) {
				return true
			}
		}
		i = j
	}
	return false
}

// waitFindings applies rule 3.
func waitFindings(fset *token.FileSet, f *ast.File, packageLevel map[string]bool) []finding {
	bounded := map[int]bool{} // lines with a "bounded:" comment
	for _, group := range f.Comments {
		for _, c := range group.List {
			if strings.Contains(c.Text, "bounded:") {
				bounded[fset.Position(c.Pos()).Line] = true
			}
		}
	}
	timers := timerVariables(f)
	var found []finding
	add := func(n ast.Node, rule string) {
		pos := fset.Position(n.Pos())
		if !bounded[pos.Line] {
			found = append(found, finding{pos, rule})
		}
	}
	scope := maps.Clone(packageLevel) // whether each name is a context without a deadline
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectStmt:
			timed := false
			for _, c := range n.Body.List {
				cc := c.(*ast.CommClause)
				if cc.Comm == nil || isTimed(cc.Comm, timers) {
					timed = true
				}
				// A case's receive is the select's business; its body is not.
				for _, s := range cc.Body {
					ast.Inspect(s, visit)
				}
			}
			if !timed {
				add(n, "a select with neither a timer, a deadline nor a default (rule 3)")
			}
			return false
		case *ast.UnaryExpr:
			if n.Op == token.ARROW && !isTimerChannel(n.X, timers) {
				add(n, "a bare receive: use await.Recv (rule 3)")
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch {
			case sel.Sel.Name == "Wait" && len(n.Args) == 0:
				add(n, "Wait() without a deadline: use await.Group or await.Do (rule 3)")
			case sel.Sel.Name == "Acquire" && len(n.Args) == 2 && isBackground(n.Args[0], scope):
				add(n, "Acquire under a context without a deadline: use await.Context (rule 3)")
			}
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if id, ok := lhs.(*ast.Ident); ok && len(n.Rhs) == len(n.Lhs) {
					scope[id.Name] = isBackgroundCall(n.Rhs[i])
				} else if ok {
					scope[id.Name] = false // a multi-value call: WithTimeout, WithCancel
				}
			}
		case *ast.FuncDecl:
			// Names follow the package's bindings until the function
			// rebinds them, in source order; parameters are the caller's.
			scope = maps.Clone(packageLevel)
			for _, field := range n.Type.Params.List {
				for _, name := range field.Names {
					scope[name.Name] = false
				}
			}
			// go test runs a program's main in a child process, not a test.
			return n.Name.Name != "main"
		}
		return true
	}
	ast.Inspect(f, visit)
	return found
}

// isTimed reports whether a select case waits on something that ends by
// itself: a timer, time.After, or a context's Done.
func isTimed(comm ast.Stmt, timers map[string]bool) bool {
	timed := false
	ast.Inspect(comm, func(n ast.Node) bool {
		if u, ok := n.(*ast.UnaryExpr); ok && u.Op == token.ARROW {
			if isTimerChannel(u.X, timers) {
				timed = true
			}
			if call, ok := u.X.(*ast.CallExpr); ok && calls(call, "Done") {
				timed = true
			}
		}
		return !timed
	})
	return timed
}

// isTimerChannel recognises time.After(d), time.Tick(d), a timer's C, and
// a variable holding one of them.
func isTimerChannel(x ast.Expr, timers map[string]bool) bool {
	switch x := x.(type) {
	case *ast.CallExpr:
		sel, ok := x.Fun.(*ast.SelectorExpr)
		return ok && isIdent(sel.X, "time") && (sel.Sel.Name == "After" || sel.Sel.Name == "Tick")
	case *ast.SelectorExpr:
		return x.Sel.Name == "C"
	case *ast.Ident:
		return timers[x.Name]
	}
	return false
}

// timerVariables names the variables of the file assigned time.After(d) or
// time.Tick(d).
func timerVariables(f *ast.File) map[string]bool {
	names := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == len(a.Rhs) {
			for i, rhs := range a.Rhs {
				if id, ok := a.Lhs[i].(*ast.Ident); ok && isTimerChannel(rhs, nil) {
					names[id.Name] = true
				}
			}
		}
		return true
	})
	return names
}

// packageBackgrounds names the package-level variables of the file set to
// context.Background() or context.TODO().
func packageBackgrounds(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gen.Specs {
			if vs, ok := spec.(*ast.ValueSpec); ok {
				for i, v := range vs.Values {
					if isBackgroundCall(v) && i < len(vs.Names) {
						names[vs.Names[i].Name] = true
					}
				}
			}
		}
	}
	return names
}

func isBackground(x ast.Expr, names map[string]bool) bool {
	if id, ok := x.(*ast.Ident); ok {
		return names[id.Name]
	}
	return isBackgroundCall(x)
}

func isBackgroundCall(x ast.Expr) bool {
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && isIdent(sel.X, "context") && (sel.Sel.Name == "Background" || sel.Sel.Name == "TODO")
}

// calls reports whether call calls a function or method of that name.
func calls(call *ast.CallExpr, name string) bool {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name == name
	case *ast.SelectorExpr:
		return fn.Sel.Name == name
	}
	return false
}

// mentions reports whether n refers to name anywhere.
func mentions(n ast.Node, name string) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == name {
			found = true
		}
		return !found
	})
	return found
}

func isIdent(x ast.Expr, name string) bool {
	id, ok := x.(*ast.Ident)
	return ok && id.Name == name
}

func intLiteral(x ast.Expr) (int64, bool) {
	lit, ok := x.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(lit.Value, "_", ""), 0, 64)
	return v, err == nil
}
