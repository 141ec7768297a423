package boundary

import (
	"strings"
	"testing"
)

func BenchmarkZZDetectors(b *testing.B) {
	big := strings.Repeat("The patient Lee was seen 2024-03-05 at clinic, phone (555) 123-4567, notes follow with many words. ", 200)
	nf, _ := nameFinder([]string{"Lee", "Kim"})
	fs := map[string]func(string) []span{"url": findURLs, "email": findEmails, "ip6": findIPv6, "ip4": findIPv4, "ssn": findSSNs, "ssnl": labelled(reSSNLabel, 9), "mrn": labelled(reMRN, 4), "acct": labelled(reAccount, 4), "intl": findIntlPhones, "us": findUSPhones, "phl": labelled(rePhoneLabel, 7), "numd": findNumericDates, "named": findNamedDates, "names": nf, "ph": func(s string) []span { rePlaceholder.FindAllStringIndex(s, -1); return nil }}
	for n, f := range fs {
		b.Run(n, func(b *testing.B) {
			for b.Loop() {
				f(big)
			}
		})
	}
}
