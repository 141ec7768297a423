package web_test

import (
	"os"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stetlabs/stet/lab/stettest"
)

// TestScreenshots writes the README's screenshots of the queue and a record
// (docs/ui-*.png) when STET_UPDATE_SCREENSHOTS=1; otherwise it has nothing
// to do.
func TestScreenshots(t *testing.T) {
	if os.Getenv("STET_UPDATE_SCREENSHOTS") != "1" {
		t.Skip("set STET_UPDATE_SCREENSHOTS=1 to rewrite docs/ui-*.png")
	}
	e := newEnv(t, envOptions{})
	harass, _, _ := e.seed(t)
	for _, r := range []struct{ ext, text string }{
		{"report-011", "My doctor said to stop the statin but a forum post says double it instead."},
		{"report-012", "Visit www.cheap-meds.example for 90% off, limited time!!!"},
		{"report-013", "Does anyone else get tired after the infusion? It lasts two days for me."},
	} {
		e.record(t, stettest.SourceReports, r.ext, r.text)
	}
	base := e.Server.URL
	shots := []struct {
		file  string
		width int
		dark  bool
		path  string
		wait  string
	}{
		{"ui-queue.png", 1280, false, "/ui/review", "table.queue"},
		{"ui-record.png", 1280, false, "/ui/review/" + harass, "form#decision"},
		{"ui-queue-390.png", 390, false, "/ui/review", "table.queue"},
		{"ui-record-dark.png", 1280, true, "/ui/review/" + harass, "form#decision"},
	}
	for _, s := range shots {
		ctx := browser(t, s.width)
		do(t, ctx, colorScheme(s.dark))
		login(t, ctx, base, stettest.ReviewerToken)
		do(t, ctx, chromedp.Navigate(base+s.path), chromedp.WaitVisible(chromedp.CSS(s.wait)))
		png := get(t, ctx, chromedp.FullScreenshot(100))
		if err := os.WriteFile(repoPath("docs", s.file), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
