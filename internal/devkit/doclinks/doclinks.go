// Package doclinks checks that the relative links of Markdown documents resolve as GitHub
// resolves them: a link or image to a path of the repository names a file or folder that exists,
// and a #fragment names a heading of its target, by GitHub's anchor for that heading (its slug,
// with -1, -2… for a heading whose slug came before). Links to other sites are not fetched.
//
// It is tooling: the repository's own test (doclinks_test.go) runs it over README.md and every
// document under docs/, so that a moved section or a renamed heading fails a test instead of
// leaving a reader at a dead link.
package doclinks

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// Problem is one link that does not resolve.
type Problem struct {
	// File is the document holding the link, relative to the checked root, with forward slashes.
	File string
	// Line is the 1-based line of the link in File.
	Line int
	// Link is the destination as written.
	Link string
	// Reason says what is wrong, in words.
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Link, p.Reason)
}

// markdown parses as GitHub does for the parts that matter here: CommonMark with GitHub's
// extensions, so that tables' cells are read for links and fenced code is never taken for one.
var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

// Checker checks documents under one root, reading each link target's headings once.
type Checker struct {
	// Root is the repository's root: links may not leave it, and a link starting with "/" starts
	// from it.
	Root string
	// anchors caches the anchors of each Markdown target, by clean path relative to Root.
	anchors map[string]map[string]bool
}

// Check returns every link of the documents (paths relative to root, with forward slashes) that
// does not resolve, in document and line order. An error is a document that cannot be read.
func Check(root string, docs []string) ([]Problem, error) {
	c := &Checker{Root: root}
	var problems []Problem
	for _, doc := range docs {
		found, err := c.CheckDocument(doc)
		if err != nil {
			return nil, err
		}
		problems = append(problems, found...)
	}
	return problems, nil
}

// CheckDocument returns every link of one document (relative to c.Root) that does not resolve.
func (c *Checker) CheckDocument(doc string) ([]Problem, error) {
	src, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(doc)))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", doc, err)
	}
	tree := markdown.Parser().Parse(text.NewReader(src))
	var problems []Problem
	report := func(n ast.Node, link, reason string) {
		problems = append(problems, Problem{File: doc, Line: lineOf(n, src, link), Link: link, Reason: reason})
	}
	err = ast.Walk(tree, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Link:
			if reason := c.resolve(doc, string(n.Destination)); reason != "" {
				report(n, string(n.Destination), reason)
			}
		case *ast.Image:
			if reason := c.resolve(doc, string(n.Destination)); reason != "" {
				report(n, string(n.Destination), reason)
			}
		case *ast.HTMLBlock, *ast.RawHTML:
			// Links written as HTML are not read; refusing them keeps every link checked.
			if html := rawText(n, src); htmlLink.MatchString(html) {
				report(n, strings.TrimSpace(html), "a link written as HTML is not checked; write it as a Markdown link")
			}
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", doc, err)
	}
	return problems, nil
}

// htmlLink finds an attribute of raw HTML that links somewhere.
var htmlLink = regexp.MustCompile(`(?i)\b(href|src)\s*=`)

// lineAnchor is GitHub's anchor to a line, or a range of lines, of a file that is not Markdown.
var lineAnchor = regexp.MustCompile(`^L([0-9]+)(?:-L([0-9]+))?$`)

// resolve says what is wrong with a link written in doc, or "" when it resolves.
func (c *Checker) resolve(doc, link string) string {
	if link == "" {
		return "the link is empty"
	}
	if u, err := url.Parse(link); err == nil && (u.Scheme != "" || u.Host != "") {
		return "" // another site: not fetched
	}
	target, fragment, hasFragment := strings.Cut(link, "#")
	target, _, _ = strings.Cut(target, "?") // GitHub ignores a query on a file (?plain=1)
	target, err := url.PathUnescape(target)
	if err != nil {
		return "the path is not valid percent-encoding"
	}
	rel := doc
	if target != "" {
		if strings.HasPrefix(target, "/") {
			rel = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			rel = path.Join(path.Dir(doc), target)
		}
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "the path leaves the repository"
	}
	info, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Sprintf("%s does not exist", rel)
	}
	if !hasFragment {
		return ""
	}
	anchor, err := url.PathUnescape(fragment)
	if err != nil {
		return "the anchor is not valid percent-encoding"
	}
	switch {
	case info.IsDir():
		return fmt.Sprintf("%s is a folder, which has no anchors", rel)
	case isMarkdown(rel):
		anchors, err := c.anchorsOf(rel)
		if err != nil {
			return err.Error()
		}
		if !anchors[anchor] {
			return fmt.Sprintf("no heading of %s has the anchor #%s", rel, anchor)
		}
		return ""
	default:
		return c.lineAnchor(rel, anchor)
	}
}

// lineAnchor checks an anchor into a file that is not Markdown: only GitHub's line anchors
// (#L12, #L12-L20) exist there, and only for lines the file has.
func (c *Checker) lineAnchor(rel, anchor string) string {
	m := lineAnchor.FindStringSubmatch(anchor)
	if m == nil {
		return fmt.Sprintf("%s is not Markdown: its only anchors are lines (#L12, #L12-L20)", rel)
	}
	src, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Sprintf("read %s: %v", rel, err)
	}
	lines := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		lines++
	}
	for _, n := range m[1:] {
		if n == "" {
			continue
		}
		if line, err := strconv.Atoi(n); err != nil || line < 1 || line > lines {
			return fmt.Sprintf("%s has %d lines, not line %s", rel, lines, n)
		}
	}
	return ""
}

// anchorsOf returns the anchors of a Markdown file relative to c.Root, read once.
func (c *Checker) anchorsOf(rel string) (map[string]bool, error) {
	if a, ok := c.anchors[rel]; ok {
		return a, nil
	}
	src, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	a := map[string]bool{}
	for _, anchor := range Anchors(src) {
		a[anchor] = true
	}
	if c.anchors == nil {
		c.anchors = map[string]map[string]bool{}
	}
	c.anchors[rel] = a
	return a, nil
}

// Anchors returns the anchors GitHub gives the headings of a Markdown document, in order.
func Anchors(src []byte) []string {
	tree := markdown.Parser().Parse(text.NewReader(src))
	var anchors []string
	seen := slugs{}
	_ = ast.Walk(tree, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if h, ok := n.(*ast.Heading); ok && entering {
			anchors = append(anchors, seen.unique(Slug(plainText(h, src))))
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return anchors
}

// slugs numbers repeated slugs as GitHub does: the second "setup" is "setup-1", the third
// "setup-2", skipping any number a heading already took ("setup-1" written as a heading).
type slugs map[string]int

func (s slugs) unique(slug string) string {
	result := slug
	for {
		if _, taken := s[result]; !taken {
			break
		}
		s[slug]++
		result = slug + "-" + strconv.Itoa(s[slug])
	}
	s[result] = 0
	return result
}

// Slug is GitHub's anchor for a heading's text before repeats are numbered: the text in lower
// case, each space a hyphen, and every character dropped that is punctuation (but the hyphen and
// the connector punctuation such as "_"), a symbol, a separator other than the space, a control,
// format, private-use or unassigned code point, or a number that is neither a digit nor a letter
// number — unless it is alphabetic.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || !dropped(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// dropped reports whether GitHub's slug leaves r out.
func dropped(r rune) bool {
	if unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) {
		return false // alphabetic
	}
	if unicode.In(r, unicode.No, unicode.Pe, unicode.Pf, unicode.Pi, unicode.Ps, unicode.Po, unicode.Pd,
		unicode.S, unicode.Cc, unicode.Cf, unicode.Co, unicode.Z) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C) // unassigned
}

// plainText is a heading's text as GitHub renders it: its text and code spans, without markup
// or raw HTML tags.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	var walk func(ast.Node)
	walk = func(n ast.Node) {
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			switch c := c.(type) {
			case *ast.Text:
				b.Write(c.Segment.Value(src))
				if c.SoftLineBreak() || c.HardLineBreak() {
					b.WriteByte(' ')
				}
			case *ast.String:
				b.Write(c.Value)
			case *ast.AutoLink:
				b.Write(c.Label(src))
			case *ast.RawHTML:
				// a tag: GitHub keeps the text around it, not the tag
			default:
				walk(c)
			}
		}
	}
	walk(n)
	return b.String()
}

// rawText is the source of a raw HTML node.
func rawText(n ast.Node, src []byte) string {
	var segs *text.Segments
	if raw, ok := n.(*ast.RawHTML); ok {
		segs = raw.Segments // an inline node: it has no lines
	} else {
		segs = n.Lines()
	}
	var b strings.Builder
	for i := 0; i < segs.Len(); i++ {
		seg := segs.At(i)
		b.Write(seg.Value(src))
	}
	return b.String()
}

// lineOf finds the line of an inline node: from the first line of the block holding it, the first
// place its destination is written (inline nodes carry no position of their own).
func lineOf(n ast.Node, src []byte, link string) int {
	start := 0
	for p := n; p != nil; p = p.Parent() {
		if p.Type() == ast.TypeBlock && p.Lines().Len() > 0 {
			start = p.Lines().At(0).Start
			break
		}
	}
	if n.Type() == ast.TypeBlock && n.Lines().Len() > 0 {
		start = n.Lines().At(0).Start
	}
	at := start
	if i := bytes.Index(src[start:], []byte(link)); i >= 0 && link != "" {
		at = start + i
	}
	return bytes.Count(src[:at], []byte("\n")) + 1
}

// isMarkdown reports whether GitHub renders a file as Markdown, and so gives its headings anchors.
func isMarkdown(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".md", ".markdown":
		return true
	}
	return false
}
