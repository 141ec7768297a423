package boundary

import (
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

func TestZZProbe(t *testing.T) {
	m, _ := NewMinimizer(stet.IdentifierClasses, []string{"Lee", "Kim"})
	for _, s := range []string{
		"Call me at 555 123 4567 or 555-1234",
		"DOB: 1/2/1960, seen 2024-03-05, 10:00",
		"+1 555 123 4567 2024",
		"ID 123-45-6789-0; v2.0.1; 10.0.0.0/8",
		"Lee Kim, kim@lee.org, Dr Lee's note",
		"reported 12/2023 and 2023/12",
		"price 1,234,567.89 and 3.14159",
		"phone: +1-555-123-4567 x200",
		"Seen Monday, Jan 3rd. Next: 4 July.",
		"scores: 10 20 3000; ratio 1:2:3",
		"ICD-10 code E11.9 and CPT 99213",
		"BP 120/80, HR 72, temp 98.6",
		"call 0800 123 4567 or 020 7946 0958",
	} {
		got, c := m.Minimize(stet.NewText(s))
		t.Logf("%q\n   -> %q %v", s, got.Reveal(), c)
	}
	big := strings.Repeat("The patient Lee was seen 2024-03-05 at clinic, phone (555) 123-4567, notes follow with many words. ", 2000)
	st := time.Now()
	m.Minimize(stet.NewText(big))
	t.Logf("big %d bytes in %v", len(big), time.Since(st))
}
