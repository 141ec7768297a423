package pipeline

import (
	"regexp"
	"strings"
	"text/template"
	"text/template/parse"
)

// A profile's prompt marks the document as data by wrapping {{.Text}} in a
// tag: "<post>\n{{.Text}}\n</post>". A document that itself contains
// "</post>" would close that block early and put what follows outside the
// data, where it reads as the profile's own instructions. dataTags finds
// the tag names a template wraps the text in, once per profile; quoteData
// neutralises those tags, and only those, in the text before it is rendered.
// Ordinary text, "<b>" or "a < b" included, reaches the model unchanged.

var (
	// openTagAtEnd is an opening tag ending a template's text node, before
	// the action that renders .Text.
	openTagAtEnd = regexp.MustCompile(`<([A-Za-z][A-Za-z0-9_.:-]*)(?:\s[^<>]*)?>\s*$`)
	// closeTagAtStart is a closing tag starting the text node after it.
	closeTagAtStart = regexp.MustCompile(`^\s*</\s*([A-Za-z][A-Za-z0-9_.:-]*)\s*>`)
)

// dataTags returns the lower-cased names of the tags t wraps {{.Text}} in.
func dataTags(t *template.Template) []string {
	var tags []string
	add := func(name string) {
		name = strings.ToLower(name)
		for _, have := range tags {
			if have == name {
				return
			}
		}
		tags = append(tags, name)
	}
	for _, tt := range t.Templates() {
		if tt.Tree == nil || tt.Tree.Root == nil {
			continue
		}
		walkLists(tt.Tree.Root, func(nodes []parse.Node) {
			for i, n := range nodes {
				if !rendersText(n) {
					continue
				}
				if i > 0 {
					if tn, ok := nodes[i-1].(*parse.TextNode); ok {
						if m := openTagAtEnd.FindSubmatch(tn.Text); m != nil {
							add(string(m[1]))
						}
					}
				}
				if i+1 < len(nodes) {
					if tn, ok := nodes[i+1].(*parse.TextNode); ok {
						if m := closeTagAtStart.FindSubmatch(tn.Text); m != nil {
							add(string(m[1]))
						}
					}
				}
			}
		})
	}
	return tags
}

// walkLists calls fn with the nodes of every list in the tree under n.
func walkLists(n parse.Node, fn func([]parse.Node)) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		fn(n.Nodes)
		for _, c := range n.Nodes {
			walkLists(c, fn)
		}
	case *parse.IfNode:
		walkLists(n.List, fn)
		walkLists(n.ElseList, fn)
	case *parse.RangeNode:
		walkLists(n.List, fn)
		walkLists(n.ElseList, fn)
	case *parse.WithNode:
		walkLists(n.List, fn)
		walkLists(n.ElseList, fn)
	}
}

// rendersText reports whether n is an action whose pipeline starts from
// .Text ({{.Text}}, {{ .Text | printf "%s" }}).
func rendersText(n parse.Node) bool {
	a, ok := n.(*parse.ActionNode)
	if !ok || a.Pipe == nil || len(a.Pipe.Decl) > 0 || len(a.Pipe.Cmds) == 0 {
		return false
	}
	args := a.Pipe.Cmds[0].Args
	if len(args) != 1 {
		return false
	}
	f, ok := args[0].(*parse.FieldNode)
	return ok && len(f.Ident) == 1 && f.Ident[0] == "Text"
}

// quoteData returns text with every opening or closing tag named in tags
// ("<post", "</post", "< / POST", any case) made inert: its "<" becomes
// "&lt;", so the model reads the tag as written and the block cannot end
// before the document does. Text without such a tag is returned as is.
func quoteData(text string, tags []string) string {
	if len(tags) == 0 || !strings.Contains(text, "<") {
		return text
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(text); i++ {
		if text[i] != '<' || !startsTag(text[i+1:], tags) {
			continue
		}
		b.WriteString(text[last:i])
		b.WriteString("&lt;")
		last = i + 1
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// startsTag reports whether s (what follows a "<") is, after optional
// spaces and an optional "/", one of tags followed by a character that
// cannot continue a tag name.
func startsTag(s string, tags []string) bool {
	s = strings.TrimLeft(s, " \t\r\n")
	s = strings.TrimPrefix(s, "/")
	s = strings.TrimLeft(s, " \t\r\n")
	for _, tag := range tags {
		if len(s) < len(tag) || !strings.EqualFold(s[:len(tag)], tag) {
			continue
		}
		if rest := s[len(tag):]; rest == "" || !isNameByte(rest[0]) {
			return true
		}
	}
	return false
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':'
}
