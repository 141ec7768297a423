package web_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/stetlabs/stet/lab/stettest"
)

// axeSource reads axe-core as scripts/test.sh installs it (npm install
// --prefix .cache/axe axe-core@4.14.1), or from STET_AXE_JS.
func axeSource(t *testing.T) string {
	t.Helper()
	path := os.Getenv("STET_AXE_JS")
	if path == "" {
		path = repoPath(".cache", "axe", "node_modules", "axe-core", "axe.min.js")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		missing(t, "axe-core is not in .cache/axe (or set STET_AXE_JS)")
	}
	return string(b)
}

type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any `json:"target"`
	} `json:"nodes"`
}

// axe injects axe-core into the page and returns every violation.
func axe(t *testing.T, ctx context.Context, src string) []axeViolation {
	t.Helper()
	do(t, ctx, discard(chromedp.Evaluate[any](src)))
	raw := get(t, ctx, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(r.violations))`, chromedp.EvalAwaitPromise))
	var vs []axeViolation
	if err := json.Unmarshal([]byte(raw), &vs); err != nil {
		t.Fatalf("axe result %s: %v", raw, err)
	}
	return vs
}

func colorScheme(dark bool) chromedp.Action[chromedp.Void] {
	v := "light"
	if dark {
		v = "dark"
	}
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}}})
		return err
	})
}

// axe-core finds no serious or critical violation on the login, queue,
// record and dispatch pages, in light and dark mode, at 1280 and 390 px.
func TestBrowserAccessibility(t *testing.T) {
	src := axeSource(t)
	chromium(t)
	e := newEnv(t, envOptions{})
	harass, _, manual := e.seed(t)
	base := e.Server.URL
	for _, width := range []int{1280, 390} {
		ctx := browser(t, width)
		for _, dark := range []bool{false, true} {
			do(t, ctx, colorScheme(dark))
			pages := []struct{ name, path, wait string }{
				{"login", "/ui/login", "#token"},
				{"queue", "/ui/review", "table.queue"},
				{"record", "/ui/review/" + harass, "form#decision"},
				{"manual record", "/ui/review/" + manual, "form#decision"},
				{"dispatch", "/ui/dispatch", "#reason"},
			}
			if !dark {
				// The harness itself can fail: an unlabelled input added to
				// the login page is a critical violation axe must report.
				do(t, ctx, chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible(chromedp.CSS("#token")),
					discard(chromedp.Evaluate[any](`document.querySelector("main").appendChild(document.createElement("input"))`)))
				found := false
				for _, v := range axe(t, ctx, src) {
					found = found || (v.ID == "label" && v.Impact == "critical")
				}
				if !found {
					t.Fatal("axe did not report an unlabelled input: the accessibility check is not running")
				}
			}
			for i, p := range pages {
				if i == 1 {
					login(t, ctx, base, stettest.OperatorToken)
				}
				do(t, ctx, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
				for _, v := range axe(t, ctx, src) {
					var where []string
					for _, n := range v.Nodes {
						b, _ := json.Marshal(n.Target)
						where = append(where, string(b))
					}
					msg := p.name + " (" + strings.Join([]string{strconv.Itoa(width), map[bool]string{false: "light", true: "dark"}[dark]}, "px ") + "): " +
						v.Impact + " " + v.ID + ": " + v.Help + " at " + strings.Join(where, ", ")
					if v.Impact == "serious" || v.Impact == "critical" {
						t.Error(msg)
					} else {
						t.Log(msg)
					}
				}
			}
			// Sign out so the next pass starts at the login page.
			do(t, ctx, chromedp.Navigate(base+"/ui/review"), chromedp.Click(chromedp.CSS(`form[action="/ui/logout"] button`)),
				chromedp.WaitVisible(chromedp.CSS("#token")))
		}
	}
}
