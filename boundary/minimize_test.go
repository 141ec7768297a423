package boundary

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stetlabs/stet"
)

var testNames = []string{"Maria Lopez", "Ann", "Ann Marie", "Okafor", "José"}

type minimizeCase struct {
	in, want string
}

// classCases holds, per class, texts with identifiers of that class (the
// want has them replaced) and texts that must come back unchanged (want "").
var classCases = map[stet.IdentifierClass][]minimizeCase{
	stet.IdentEmail: {
		{"write to jane.doe@example.com today", "write to [EMAIL] today"},
		{"<J.Smith+nhs@mail.example.co.uk>", "<[EMAIL]>"},
		{"Email: ana_b@clinic.org.", "Email: [EMAIL]."},
		{"josé@hospital.es replied", "[EMAIL] replied"},
		{"a@b.co and c@d.io", "[EMAIL] and [EMAIL]"},
		{"the @handle is not an address", ""},
		{"meet at 5@ the lobby", ""},
		{"user@localhost has no domain", ""},
		{"version foo@1.2.3", ""},
	},
	stet.IdentPhone: {
		{"call (555) 123-4567 now", "call [PHONE] now"},
		{"call 555-123-4567.", "call [PHONE]."},
		{"call 555.123.4567", "call [PHONE]"},
		{"+1 555 123 4567 is the desk", "[PHONE] is the desk"},
		{"+1 (555) 123-4567", "[PHONE]"},
		{"1-555-123-4567", "[PHONE]"},
		{"London +44 20 7946 0958, ext", "London [PHONE], ext"},
		{"Paris +33 1 23 45 67 89", "Paris [PHONE]"},
		{"+442079460958", "[PHONE]"},
		{"+1 555 123 4567 2024 visits", "[PHONE] 2024 visits"},
		{"+1-555-123-4567 x200", "[PHONE] x200"},
		// Fuzz finding: a number after an international phone took its digits
		// past 15 and the whole phone survived.
		{"+44 20 7946 0958 2024 visits", "[PHONE] 2024 visits"},
		{"+81 3-1234-5678 00000", "[PHONE] 00000"},
		// Fuzz finding: a word glued to a number after the phone ("10am")
		// made the whole phone survive.
		{"call +44 20 7946 0958 10am", "call [PHONE] 10am"},
		{"call 020 7946 0958 or (0161) 496 0000", "call [PHONE] or [PHONE]"},
		{"freephone 0800 123 4567", "freephone [PHONE]"},
		{"tel: 5551234567", "tel: [PHONE]"},
		{"Phone number: 07946095812", "Phone number: [PHONE]"},
		{"(555)123-4567", "[PHONE]"},
		{"born in 1987, seen 2024", ""},
		{"room 5551, bed 12", ""},
		{"dial 555-1234 locally", ""},
		{"order 1234567890 shipped", ""},
		{"+12 items", ""},
		{"id 5555-123-4567", ""},
		{"ref 555-123-45678", ""},
	},
	stet.IdentSSN: {
		{"SSN 123-45-6789", "SSN [SSN]"},
		{"his number is 123-45-6789.", "his number is [SSN]."},
		{"SSN: 123456789", "SSN: [SSN]"},
		{"ssn#123 45 6789", "ssn#[SSN]"},
		{"Social Security Number is 987654321", "Social Security Number is [SSN]"},
		{"lot 123456789 shipped", ""},
		{"part 1123-45-6789", ""},
		{"SSN 12345678", ""},
		{"SSN 1234567890", ""},
		{"SSN pending", ""},
	},
	stet.IdentMRN: {
		{"MRN: 00123456", "MRN: [MRN]"},
		{"MRN 884422", "MRN [MRN]"},
		{"mr# A1234567", "mr# [MRN]"},
		{"MR #: 55-1234", "MR #: [MRN]"},
		{"medical record number 7788990", "medical record number [MRN]"},
		{"Medical record no. 7788990.", "Medical record no. [MRN]."},
		{"medical record #44556677", "medical record #[MRN]"},
		{"MRN is 4455 6677 8899", "MRN is [MRN]"},
		{"MRN pending", ""},
		{"medical record was reviewed", ""},
		{"MRN 12", ""},
		{"the MRI 2024 scan", ""},
	},
	stet.IdentAccount: {
		{"account 12345678", "account [ACCOUNT]"},
		{"Account number: GB82-1234", "Account number: [ACCOUNT]"},
		{"acct# 000123", "acct# [ACCOUNT]"},
		{"Acct. no. 99887766", "Acct. no. [ACCOUNT]"},
		{"member ID: XJH123456789", "member ID: [ACCOUNT]"},
		{"Member ID is W1234 5678", "Member ID is [ACCOUNT]"},
		{"policy number 1234 5678 9012", "policy number [ACCOUNT]"},
		{"Policy #: PX-4455", "Policy #: [ACCOUNT]"},
		{"took into account the 3 falls", ""},
		{"account of 2 visits", ""},
		{"account: closed", ""},
		{"policy 12345 on file", ""},
		{"the accountant 1234", ""},
	},
	stet.IdentURL: {
		{"see https://example.com/path?q=1.", "see [URL]."},
		{"(http://portal.example.org/a_(b))", "([URL])"},
		{"visit www.example.com/forum today", "visit [URL] today"},
		{"WWW.EXAMPLE.ORG", "[URL]"},
		{"https://10.0.0.1:8443/x?to=a@b.org", "[URL]"},
		{"at http://[2001:db8::1]/x", "at [URL]"},
		{"http:// is a scheme", ""},
		{"the www is big", ""},
		{"ftp files", ""},
	},
	stet.IdentIP: {
		{"from 192.168.1.20 at noon", "from [IP] at noon"},
		{"host 10.0.0.1:8080", "host [IP]:8080"},
		{"net 10.0.0.0/8", "net [IP]/8"},
		{"gw 255.255.255.255.", "gw [IP]."},
		{"v6 2001:db8:85a3::8a2e:370:7334 ok", "v6 [IP] ok"},
		{"loopback ::1", "loopback [IP]"},
		{"link fe80::1ff:fe23:4567:890a", "link [IP]"},
		{"mapped ::ffff:192.0.2.128", "mapped [IP]"},
		{"full 2001:0db8:0000:0000:0000:ff00:0042:8329", "full [IP]"},
		{"version 1.2.3.4.5", ""},
		{"not 256.1.1.1", ""},
		{"v1.2.3.4", ""},
		{"at 10:30:45 today", ""},
		{"mac 00:1A:2B:3C:4D:5E", ""},
		{"ratio 3:2 and ::", ""},
		{"add:: word", ""},
	},
	stet.IdentDate: {
		{"on 2024-03-05 we met", "on [DATE] we met"},
		{"at 2024-03-05T10:30:00Z", "at [DATE]"},
		{"on 03/05/2024.", "on [DATE]."},
		{"on 3/5/24", "on [DATE]"},
		{"on 05.03.2024", "on [DATE]"},
		{"on 03-05-2024", "on [DATE]"},
		{"on 5 March 2024", "on [DATE]"},
		{"on 5th of March, 2024", "on [DATE]"},
		{"on March 5, 2024 at", "on [DATE] at"},
		{"on mar. 5 2024", "on [DATE]"},
		{"on Sept 30th", "on [DATE]"},
		{"since 12 Jan", "since [DATE]"},
		{"in May 2023", "in [DATE]"},
		{"since 03/2021,", "since [DATE],"},
		{"Next: 4 July.", "Next: [DATE]."},
		{"in 2024 overall", ""},
		{"version 1.2.10", ""},
		{"2024-13-05 is no date", ""},
		{"13/13/2024", ""},
		{"it may 5 times", ""},
		{"marching 5 miles", ""},
		{"score 3/4", ""},
		{"BP 120/80, 13/2024", ""},
		{"primary 2024 summary", ""},
		{"Mar 20245 units", ""},
		{"32 March 2024", "32 [DATE]"}, // no day 32: only the month and year go
	},
	stet.IdentName: {
		{"Maria Lopez called", "[NAME] called"},
		{"MARIA   LOPEZ called", "[NAME] called"},
		{"ann and ANN MARIE", "[NAME] and [NAME]"},
		{"Ann Okafor", "[NAME] [NAME]"},
		{"José came", "[NAME] came"},
		{"Anne called", ""},
		{"Annual review", ""},
		{"Joséa came", ""},
		{"Marian", ""},
	},
}

func TestMinimizeClasses(t *testing.T) {
	t.Parallel()
	for class, cases := range classCases {
		m, err := NewMinimizer([]stet.IdentifierClass{class}, testNames)
		if err != nil {
			t.Fatalf("NewMinimizer(%s) = %v", class, err)
		}
		for _, c := range cases {
			t.Run(string(class)+"/"+c.in, func(t *testing.T) {
				t.Parallel()
				want := c.want
				if want == "" {
					want = c.in
				}
				got, counts := m.Minimize(stet.NewText(c.in))
				if got.Reveal() != want {
					t.Errorf("Minimize(%q) = %q, want %q", c.in, got.Reveal(), want)
				}
				wantN := strings.Count(want, Placeholder(class)) - strings.Count(c.in, Placeholder(class))
				if counts[class] != wantN || len(counts) > 1 || len(counts) == 1 && wantN == 0 {
					t.Errorf("Minimize(%q) counts = %v, want %s:%d", c.in, counts, class, wantN)
				}
			})
		}
	}
}

func allClasses(t *testing.T) *Minimizer {
	t.Helper()
	m, err := NewMinimizer(stet.IdentifierClasses, testNames)
	if err != nil {
		t.Fatalf("NewMinimizer(all) = %v", err)
	}
	return m
}

const paragraph = `Patient Maria Lopez (MRN: 00482913, DOB 03/14/1962) was seen on March 5, 2024 ` +
	`by Dr. Okafor. SSN 123-45-6789; member ID XJH884422. Reach her at maria.lopez@example.com ` +
	`or (555) 123-4567; her daughter Ann is on +44 20 7946 0958. Portal: https://portal.example.org/p?id=77&mail=a@b.org ` +
	`and www.example.com/help. Login from 192.168.10.4 and 2001:db8::7 on 2024-03-06. ` +
	`Follow-up in 2 weeks; 3 doses of 40 mg; call 911 if worse. Account number: 4455 6677 8899.`

const paragraphWant = `Patient [NAME] (MRN: [MRN], DOB [DATE]) was seen on [DATE] ` +
	`by Dr. [NAME]. SSN [SSN]; member ID [ACCOUNT]. Reach her at [EMAIL] ` +
	`or [PHONE]; her daughter [NAME] is on [PHONE]. Portal: [URL] ` +
	`and [URL]. Login from [IP] and [IP] on [DATE]. ` +
	`Follow-up in 2 weeks; 3 doses of 40 mg; call 911 if worse. Account number: [ACCOUNT].`

func TestMinimizeParagraph(t *testing.T) {
	t.Parallel()
	got, counts := allClasses(t).Minimize(stet.NewText(paragraph))
	if got.Reveal() != paragraphWant {
		t.Errorf("Minimize(paragraph) =\n%s\nwant\n%s", got.Reveal(), paragraphWant)
	}
	want := map[stet.IdentifierClass]int{
		stet.IdentName: 3, stet.IdentMRN: 1, stet.IdentDate: 3, stet.IdentSSN: 1, stet.IdentAccount: 2,
		stet.IdentEmail: 1, stet.IdentPhone: 2, stet.IdentURL: 2, stet.IdentIP: 2,
	}
	if !maps.Equal(counts, want) {
		t.Errorf("Minimize(paragraph) counts = %v, want %v", counts, want)
	}
}

func TestMinimizeIdempotent(t *testing.T) {
	t.Parallel()
	m := allClasses(t)
	inputs := []string{paragraph, paragraphWant, "[EMAIL] [NAME]name [IP]:: SSN [SSN] 123-45-6789"}
	for _, cases := range classCases {
		for _, c := range cases {
			inputs = append(inputs, c.in)
		}
	}
	for _, in := range inputs {
		once, _ := m.Minimize(stet.NewText(in))
		twice, counts := m.Minimize(once)
		if twice.Reveal() != once.Reveal() || len(counts) != 0 {
			t.Errorf("Minimize(Minimize(%q)) = %q with counts %v, want %q unchanged", in, twice.Reveal(), counts, once.Reveal())
		}
	}
}

// A dictionary name that is also a placeholder word must not eat placeholders.
func TestMinimizePlaceholdersAreNotRematched(t *testing.T) {
	t.Parallel()
	m, err := NewMinimizer([]stet.IdentifierClass{stet.IdentName, stet.IdentEmail}, []string{"email", "name", "Date"})
	if err != nil {
		t.Fatal(err)
	}
	in := "Email a@b.org [NAME] [DATE] date"
	got, counts := m.Minimize(stet.NewText(in))
	want := "[NAME] [EMAIL] [NAME] [DATE] [NAME]"
	if got.Reveal() != want || counts[stet.IdentName] != 2 || counts[stet.IdentEmail] != 1 {
		t.Errorf("Minimize(%q) = %q, %v; want %q, name:2 email:1", in, got.Reveal(), counts, want)
	}
}

func TestMinimizeLeavesUnselectedClasses(t *testing.T) {
	t.Parallel()
	for _, class := range stet.IdentifierClasses {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			others := slices.DeleteFunc(slices.Clone(stet.IdentifierClasses), func(c stet.IdentifierClass) bool { return c == class })
			m, err := NewMinimizer(others, testNames)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range classCases[class] {
				if c.want == "" {
					continue
				}
				got, counts := m.Minimize(stet.NewText(c.in))
				if strings.Contains(got.Reveal(), Placeholder(class)) || counts[class] != 0 {
					t.Errorf("Minimize(%q) without %s = %q, %v; want no %s", c.in, class, got.Reveal(), counts, Placeholder(class))
				}
			}
		})
	}
	m, err := NewMinimizer(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, counts := m.Minimize(stet.NewText(paragraph)); got.Reveal() != paragraph || len(counts) != 0 {
		t.Errorf("Minimize(paragraph) with no classes = %q, %v; want it unchanged", got.Reveal(), counts)
	}
	m, err = NewMinimizer([]stet.IdentifierClass{stet.IdentEmail}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := m.Minimize(stet.NewText(paragraph))
	// The email inside the URL goes too: without the url class, nothing hides it.
	want := strings.NewReplacer("maria.lopez@example.com", "[EMAIL]", "a@b.org", "[EMAIL]").Replace(paragraph)
	if got.Reveal() != want {
		t.Errorf("Minimize(paragraph) with email only =\n%s\nwant\n%s", got.Reveal(), want)
	}
}

func TestNewMinimizerErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		classes []stet.IdentifierClass
		names   []string
	}{
		{"unknown class", []stet.IdentifierClass{"passport"}, nil},
		{"name without dictionary", []stet.IdentifierClass{stet.IdentName}, nil},
		{"name with blank dictionary", []stet.IdentifierClass{stet.IdentName}, []string{" ", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewMinimizer(tt.classes, tt.names); err == nil {
				t.Errorf("NewMinimizer(%v, %q) = nil error, want an error", tt.classes, tt.names)
			}
		})
	}
	// A dictionary is not needed, and not checked, when names are not selected.
	if _, err := NewMinimizer([]stet.IdentifierClass{stet.IdentEmail}, nil); err != nil {
		t.Errorf("NewMinimizer(email, nil) = %v, want nil", err)
	}
}

func TestNewMinimizerErrorHidesNames(t *testing.T) {
	t.Parallel()
	_, err := NewMinimizer([]stet.IdentifierClass{stet.IdentName, "bogus"}, []string{"Zebulon Canary"})
	if err == nil || strings.Contains(err.Error(), "Zebulon") {
		t.Errorf("NewMinimizer error = %v, want an error without the dictionary", err)
	}
}

func TestPrecedenceCoversEveryClass(t *testing.T) {
	t.Parallel()
	if !slices.Equal(slices.Sorted(slices.Values(precedence)), slices.Sorted(slices.Values(stet.IdentifierClasses))) {
		t.Errorf("precedence = %v, want every class of %v once", precedence, stet.IdentifierClasses)
	}
	for _, c := range stet.IdentifierClasses {
		if p := Placeholder(c); p != "["+strings.ToUpper(string(c))+"]" {
			t.Errorf("Placeholder(%s) = %q", c, p)
		}
		if c != stet.IdentName && len(shapeFinders[c]) == 0 {
			t.Errorf("shapeFinders[%s] is empty", c)
		}
	}
}

func TestMinimizeConcurrent(t *testing.T) {
	t.Parallel()
	m := allClasses(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := range 8 {
		wg.Go(func() {
			in := fmt.Sprintf("%s #%d", paragraph, i)
			got, _ := m.Minimize(stet.NewText(in))
			if want := fmt.Sprintf("%s #%d", paragraphWant, i); got.Reveal() != want {
				errs <- got.Reveal()
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("concurrent Minimize(paragraph) = %q, want %q", e, paragraphWant)
	}
}

func BenchmarkMinimize(b *testing.B) {
	m, err := NewMinimizer(stet.IdentifierClasses, testNames)
	if err != nil {
		b.Fatal(err)
	}
	text := stet.NewText(strings.Repeat(paragraph+"\n", 20)) // about 10 KB
	b.SetBytes(int64(text.Len()))
	for b.Loop() {
		m.Minimize(text)
	}
}
