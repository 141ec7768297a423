package web_test

import (
	"net/http"
	"strings"
	"testing"
)

// Every UI answer carries the security headers; GET / is the queue; the
// login page's cookie is HttpOnly and SameSite=Strict.
func TestSecurityHeadersAndRedirect(t *testing.T) {
	e := newEnv(t, envOptions{})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/ui/login", "/ui/review", "/ui/assets/stet.css", "/ui/nosuch"} {
		resp, err := client.Get(e.Server.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		for k, want := range map[string]string{
			"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
			"Referrer-Policy":         "no-referrer",
			"Cache-Control":           "no-store",
			"X-Content-Type-Options":  "nosniff",
		} {
			if !strings.HasPrefix(h.Get(k), want) {
				t.Errorf("GET %s: %s = %q, want %q", path, k, h.Get(k), want)
			}
		}
		if strings.Contains(h.Get("Content-Security-Policy"), "unsafe-inline") {
			t.Errorf("GET %s: the CSP allows inline script", path)
		}
	}
	resp, err := client.Get(e.Server.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/review" {
		t.Fatalf("GET / = %d to %q, want 303 to /ui/review", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = client.Get(e.Server.URL + "/ui/review")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Fatalf("GET /ui/review without a session = %d to %q, want the login page", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The API's own 404 problem is unchanged outside /ui/.
	resp, err = client.Get(e.Server.URL + "/nosuch")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("GET /nosuch = %d %s, want the API's 404 problem", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
