package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
)

// mutant is one small change to a source file: the bytes from start to end give way
// to replacement.
type mutant struct {
	file      string
	line, col int
	// what says what changed, for the list of survivors.
	what        string
	start, end  int
	replacement string
}

func (m mutant) String() string { return fmt.Sprintf("%s:%d:%d: %s", m.file, m.line, m.col, m.what) }

// apply returns src with the mutation made.
func (m mutant) apply(src []byte) []byte {
	out := make([]byte, 0, len(src)+len(m.replacement))
	out = append(out, src[:m.start]...)
	out = append(out, m.replacement...)
	return append(out, src[m.end:]...)
}

// flipped is the operator each comparison or logical operator turns into: its
// negation, so that every mutant changes the outcome somewhere.
var flipped = map[token.Token]token.Token{
	token.EQL:  token.NEQ,
	token.NEQ:  token.EQL,
	token.LSS:  token.GEQ,
	token.GEQ:  token.LSS,
	token.GTR:  token.LEQ,
	token.LEQ:  token.GTR,
	token.LAND: token.LOR,
	token.LOR:  token.LAND,
}

// mutants lists, in the order of the source, every mutant of the file:
//   - a guard, an if with no else whose body ends in a return, never taken: its
//     condition c becomes false && (c), which keeps what c uses in use;
//   - each ==, !=, <, >=, >, <=, && and || turned into its opposite;
//   - each !x turned into x.
//
// Each compiles wherever the original does.
func mutants(path string, src []byte) ([]mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	offset := func(p token.Pos) int { return fset.Position(p).Offset }
	var out []mutant
	add := func(at token.Pos, what string, start, end int, replacement string) {
		pos := fset.Position(at)
		out = append(out, mutant{file: path, line: pos.Line, col: pos.Column, what: what, start: start, end: end, replacement: replacement})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt:
			if n.Else == nil && endsInReturn(n.Body) {
				start, end := offset(n.Cond.Pos()), offset(n.Cond.End())
				cond := string(src[start:end])
				add(n.If, fmt.Sprintf("guard removed: if %s { ... return }", short(cond)), start, end, "false && ("+cond+")")
			}
		case *ast.BinaryExpr:
			if to, ok := flipped[n.Op]; ok {
				start := offset(n.OpPos)
				add(n.OpPos, fmt.Sprintf("%q -> %q in %s", n.Op, to, short(string(src[offset(n.Pos()):offset(n.End())]))),
					start, start+len(n.Op.String()), to.String())
			}
		case *ast.UnaryExpr:
			if n.Op == token.NOT {
				start := offset(n.OpPos)
				x := string(src[offset(n.X.Pos()):offset(n.X.End())])
				add(n.OpPos, fmt.Sprintf("%q -> %q", "!"+short(x), short(x)), start, start+1, "")
			}
		}
		return true
	})
	slices.SortStableFunc(out, func(a, b mutant) int { return a.start - b.start })
	return out, nil
}

func endsInReturn(body *ast.BlockStmt) bool {
	if len(body.List) == 0 {
		return false
	}
	_, ok := body.List[len(body.List)-1].(*ast.ReturnStmt)
	return ok
}

// short puts an expression on one line, cut to a length a list can show.
func short(expr string) string {
	expr = strings.Join(strings.Fields(expr), " ")
	const limit = 70
	if len(expr) > limit {
		return expr[:limit-3] + "..."
	}
	return expr
}
