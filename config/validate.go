package config

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/schema"
)

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// validate checks every section of c, one function a section, and fills
// in defaults.
func (l *loader) validate(c *Config) {
	l.validateDatabase(c)
	l.validateListen(c)
	if !l.present("body_limit") {
		c.BodyLimit = DefaultBodyLimit
	} else if c.BodyLimit <= 0 {
		l.problem("body_limit", "must be greater than 0")
	}

	ids := sectionIDs{
		tenants:      checkIDs(l, "tenants", c.Tenants, func(t *Tenant) string { return t.ID }),
		profiles:     checkIDs(l, "profiles", c.Profiles, func(p *Profile) string { return p.ID }),
		processors:   checkIDs(l, "processors", c.Processors, func(p *Processor) string { return p.ID }),
		policies:     checkIDs(l, "policies", c.Policies, func(p *Policy) string { return p.ID }),
		transcribers: checkIDs(l, "transcribers", c.Transcribers, func(p *Processor) string { return p.ID }),
	}
	for i := range c.Transcribers {
		// Attempts name the processor or transcriber that ran: one
		// namespace.
		if id := c.Transcribers[i].ID; ids.processors[id] {
			l.problem(join(index("transcribers", i), "id"), "%q is already a processor's id", id)
		}
	}
	checkIDs(l, "sources", c.Sources, func(s *Source) string { return s.ID })

	l.validateTenants(c)
	l.validateSources(c, ids)
	l.validateProfiles(c, ids)
	l.validateProcessors(c)
	for i := range c.Transcribers {
		l.validateProcessor(index("transcribers", i), &c.Transcribers[i], true)
	}
	l.validatePolicies(c, ids)
	l.validatePartPolicies(c)
	l.validateAudioSources(c)
	l.validateWorkers(&c.Workers)
	l.validateSecurity(c)
	l.validateWeb(&c.Web, c.TLS != nil)
	l.validateAlerts(&c.Alerts)
	l.validateTelemetry(&c.Telemetry)
	l.validateEncryption(c)
}

// sectionIDs are the well-formed, unique ids of each section that others
// refer to.
type sectionIDs struct {
	tenants, profiles, processors, policies, transcribers map[string]bool
}

// checkIDs checks that every item of a list has a well-formed id unique in
// the list, and returns the set of ids.
func checkIDs[T any](l *loader, list string, items []T, id func(*T) string) map[string]bool {
	first := map[string]string{}
	for i := range items {
		p := join(index(list, i), "id")
		v := id(&items[i])
		switch {
		case v == "":
			l.problem(p, "required")
		case !idPattern.MatchString(v):
			l.problem(p, "must be lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
		case first[v] != "":
			l.problem(p, "duplicate id %q (also at %s)", v, first[v])
		default:
			first[v] = index(list, i)
		}
	}
	ids := make(map[string]bool, len(first))
	for v := range first {
		ids[v] = true
	}
	return ids
}

func (l *loader) validateDatabase(c *Config) {
	const p = "database"
	db := c.Database
	switch {
	case db == "":
		l.problem(p, "required (sqlite://PATH or postgres://…)")
	case strings.HasPrefix(db, "sqlite://"):
		rest, query, hasQuery := strings.Cut(strings.TrimPrefix(db, "sqlite://"), "?")
		if rest == "" {
			l.problem(p, "sqlite:// needs a file path")
			return
		}
		if !filepath.IsAbs(rest) {
			rest = filepath.Join(l.dir, rest)
		}
		c.Database = "sqlite://" + filepath.ToSlash(rest)
		if hasQuery {
			c.Database += "?" + query
		}
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		// The URL may hold a password: say what is wrong without quoting it.
		for _, reason := range postgresURLProblems(db) {
			l.problem(p, "%s", reason)
		}
	default:
		l.problem(p, "must start with sqlite://, postgres:// or postgresql://")
	}
}

func (l *loader) validateListen(c *Config) {
	if c.Listen == "" {
		c.Listen = DefaultListen
		return
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		l.problem("listen", "must be host:port, such as 127.0.0.1:8080")
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		l.problem("listen", "port must be a number from 0 to 65535")
	}
}

func (l *loader) validateTenants(c *Config) {
	firstToken := map[string]string{} // token value → path of its first use
	for i := range c.Tenants {
		t := &c.Tenants[i]
		tp := index("tenants", i)
		names := map[string]bool{}
		for j := range t.Tokens {
			tok := &t.Tokens[j]
			p := index(join(tp, "tokens"), j)
			switch {
			case tok.Name == "":
				l.problem(join(p, "name"), "required")
			case names[tok.Name]:
				l.problem(join(p, "name"), "duplicate token name %q in this tenant", tok.Name)
			}
			names[tok.Name] = true
			if tok.Role == "" {
				l.problem(join(p, "role"), "required (%s)", joinStrings(stet.Roles, " | "))
			} else if !slices.Contains(stet.Roles, tok.Role) {
				l.problem(join(p, "role"), "must be one of %s", joinStrings(stet.Roles, " | "))
			}
			tok.Value = l.env(join(p, "token_env"), tok.TokenEnv)
			if tok.Value == "" {
				continue
			}
			if len(tok.Value) < MinTokenLength {
				l.problem(join(p, "token_env"), "environment variable %s holds a token of %d characters: at least %d are required", tok.TokenEnv, len(tok.Value), MinTokenLength)
				continue
			}
			if prev, dup := firstToken[tok.Value]; dup {
				l.problem(join(p, "token_env"), "environment variable %s holds the same token as %s: every token must be unique", tok.TokenEnv, prev)
				continue
			}
			firstToken[tok.Value] = p
		}
	}
}

func (l *loader) validateSources(c *Config, ids sectionIDs) {
	for i := range c.Sources {
		l.validateSource(index("sources", i), &c.Sources[i], ids)
	}
}

func (l *loader) validateSource(p string, s *Source, ids sectionIDs) {
	ref := func(key, v, list string, ids map[string]bool) {
		switch {
		case v == "":
			l.problem(join(p, key), "required")
		case !ids[v]:
			l.problem(join(p, key), "%s %q is not defined under %s", key, v, list)
		}
	}
	ref("tenant", s.Tenant, "tenants", ids.tenants)
	ref("profile", s.Profile, "profiles", ids.profiles)
	ref("policy", s.Policy, "policies", ids.policies)

	if s.Identity == "" {
		s.Identity = stet.IdentityExternalID
	} else if !slices.Contains(stet.IdentityModes, s.Identity) {
		l.problem(join(p, "identity"), "must be one of %s", joinStrings(stet.IdentityModes, " | "))
	}
	if s.Revisions == "" {
		s.Revisions = stet.RevisionsExplicit
	} else if !slices.Contains(stet.RevisionModes, s.Revisions) {
		l.problem(join(p, "revisions"), "must be one of %s", joinStrings(stet.RevisionModes, " | "))
	}
	if len(s.Media) == 0 {
		s.Media = []string{MediaText}
	}
	for i, m := range s.Media {
		mp := index(join(p, "media"), i)
		switch {
		case m != MediaText && m != MediaAudio:
			l.problem(mp, "must be text or audio")
		case slices.Index(s.Media, m) < i:
			l.problem(mp, "%s is listed twice", m)
		}
	}
	if !l.present(join(p, "audio_body_limit")) {
		s.AudioBodyLimit = DefaultAudioBodyLimit
	} else if s.AudioBodyLimit <= 0 {
		l.problem(join(p, "audio_body_limit"), "must be greater than 0")
	}
	if s.Mode == "" {
		s.Mode = stet.ModeSync
	} else if !slices.Contains(stet.DispatchModes, s.Mode) {
		l.problem(join(p, "mode"), "must be one of %s", joinStrings(stet.DispatchModes, " | "))
	}

	l.validateDestinations(p, s)

	sp := join(p, "secret_env")
	v := l.env(sp, s.SecretEnv)
	if v == "" {
		return
	}
	parts := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	for i, secret := range parts {
		key, ok := strings.CutPrefix(secret, "whsec_")
		if !ok {
			l.problem(sp, "secret %d of %d in %s does not start with whsec_", i+1, len(parts), s.SecretEnv)
			continue
		}
		b, err := base64.StdEncoding.DecodeString(key)
		if err != nil || len(b) == 0 {
			l.problem(sp, "secret %d of %d in %s is not whsec_ followed by base64", i+1, len(parts), s.SecretEnv)
			continue
		}
		if len(b) < MinSecretBytes {
			l.problem(sp, "secret %d of %d in %s is %d bytes: at least %d are required", i+1, len(parts), s.SecretEnv, len(b), MinSecretBytes)
			continue
		}
		s.Secrets = append(s.Secrets, secret)
	}
}

func (l *loader) validateProfiles(c *Config, ids sectionIDs) {
	for i := range c.Profiles {
		l.validateProfile(index("profiles", i), &c.Profiles[i])
		l.validateParts(index("profiles", i), &c.Profiles[i], ids.processors)
	}
}

// validateParts checks a profile's parts (docs/design.md §16) and
// resolves each part's fields: every top-level property of the schema in
// exactly one part, "*" taking the rest.
func (l *loader) validateParts(p string, pr *Profile, processors map[string]bool) {
	if len(pr.Parts) == 0 {
		return
	}
	pp := join(p, "parts")
	if len(pr.Parts) == 1 {
		l.problem(pp, "a profile with parts needs two or more; for one request over the whole schema, leave parts out")
	}
	checkIDs(l, pp, pr.Parts, func(pt *Part) string { return pt.ID })
	var props []string
	if pr.SchemaJSON != nil {
		var err error
		if props, err = schema.Properties(pr.SchemaJSON); err != nil {
			l.problem(join(p, "schema"), "%v", err)
			return
		}
	}
	owner := map[string]string{} // field → the part that names it
	rest := -1
	for i := range pr.Parts {
		pt := &pr.Parts[i]
		fp := join(index(pp, i), "fields")
		switch {
		case pt.Fields.Rest && rest >= 0:
			l.problem(fp, `only one part may take the rest ("*"); %s does too`, index(pp, rest))
		case pt.Fields.Rest:
			rest = i
		case !l.present(fp) || len(pt.Fields.List) == 0:
			l.problem(fp, `required: a list of the schema's top-level fields, or "*" for the rest`)
		}
		for k, f := range pt.Fields.List {
			switch {
			case pr.SchemaJSON != nil && !slices.Contains(props, f):
				l.problem(index(fp, k), "%q is not a top-level property of the profile's schema", f)
			case owner[f] == index(pp, i):
				l.problem(index(fp, k), "%q is listed twice", f)
			case owner[f] != "":
				l.problem(index(fp, k), "%q is already in %s", f, owner[f])
			default:
				owner[f] = index(pp, i)
			}
		}
		for k, id := range pt.Processors {
			kp := index(join(index(pp, i), "processors"), k)
			switch {
			case !processors[id]:
				l.problem(kp, "processor %q is not defined under processors", id)
			case slices.Index(pt.Processors, id) < k:
				l.problem(kp, "processor %q is listed twice", id)
			}
		}
	}
	if pr.SchemaJSON == nil {
		return
	}
	var left []string
	for _, f := range props {
		if owner[f] == "" {
			left = append(left, f)
		}
	}
	for i := range pr.Parts {
		pt := &pr.Parts[i]
		if pt.Fields.Rest {
			pt.Resolved = left
		} else {
			pt.Resolved = slices.DeleteFunc(slices.Clone(props), func(f string) bool { return !slices.Contains(pt.Fields.List, f) })
		}
	}
	switch {
	case rest >= 0 && len(left) == 0:
		l.problem(join(index(pp, rest), "fields"), `"*" takes no field: the other parts name every one`)
	case rest < 0 && len(left) > 0:
		l.problem(pp, "fields %s belong to no part: name them, or give one part fields: \"*\"", joinStrings(left, ", "))
	}
}

// validatePartPolicies checks that every processor a part names is
// permitted by the policy of every source using its profile.
func (l *loader) validatePartPolicies(c *Config) {
	for i := range c.Profiles {
		pr := &c.Profiles[i]
		for j := range pr.Parts {
			for k, id := range pr.Parts[j].Processors {
				for _, s := range c.Sources {
					pol := c.Policy(s.Policy)
					if s.Profile != pr.ID || pol == nil || slices.Contains(pol.Processors, id) {
						continue
					}
					l.problem(index(join(index(join(index("profiles", i), "parts"), j), "processors"), k),
						"processor %q is not permitted by policy %q, which source %q uses", id, pol.ID, s.ID)
				}
			}
		}
	}
}

func (l *loader) validateProfile(p string, pr *Profile) {
	if pr.Version < 1 {
		l.problem(join(p, "version"), "must be 1 or more")
	}
	if doc, ok := l.readFile(join(p, "schema"), &pr.Schema); ok {
		s, err := schema.Compile(pr.ID, doc)
		if err != nil {
			l.problem(join(p, "schema"), "%s: %v", pr.Schema, err)
		} else {
			pr.SchemaJSON = s.JSON()
			pr.Validator = s
		}
	}
	if text, ok := l.readFile(join(p, "prompt"), &pr.Prompt); ok {
		if _, err := template.New(pr.ID).Parse(string(text)); err != nil {
			l.problem(join(p, "prompt"), "%s: not a valid Go text/template: %v", pr.Prompt, err)
		} else {
			pr.PromptText = string(text)
		}
	}
	l.validateAcceptance(join(p, "acceptance"), pr)
}

// validateAcceptance checks a profile's acceptance rule: every field is a
// property of the schema, every bound a share from 0 to 1.
func (l *loader) validateAcceptance(p string, pr *Profile) {
	share := func(path string, v float64) {
		if v < 0 || v > 1 {
			l.problem(path, "must be a share from 0 to 1")
		}
	}
	var props map[string]json.RawMessage
	if pr.SchemaJSON != nil {
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		_ = json.Unmarshal(pr.SchemaJSON, &s)
		props = s.Properties
	}
	for _, name := range slices.Sorted(maps.Keys(pr.Acceptance.Fields)) {
		fp := join(join(p, "fields"), name)
		if pr.SchemaJSON != nil && props[name] == nil {
			l.problem(fp, "%q is not a property of the profile's schema", name)
		}
		mp := join(fp, "min_accuracy")
		if !l.present(mp) {
			l.problem(mp, "required: a share from 0 to 1")
			continue
		}
		share(mp, pr.Acceptance.Fields[name].MinAccuracy)
	}
	if r := pr.Acceptance.MaxSchemaFailureRate; r != nil {
		share(join(p, "max_schema_failure_rate"), *r)
	}
}

func (l *loader) validateProcessors(c *Config) {
	for i := range c.Processors {
		l.validateProcessor(index("processors", i), &c.Processors[i], false)
	}
}

func (l *loader) validateProcessor(p string, pr *Processor, transcriber bool) {
	kp := join(p, "kind")
	kind := lookupKind(pr.Kind, transcriber)
	names := ProcessorKinds
	if transcriber {
		names = TranscriberKinds
	}
	switch {
	case pr.Kind == "":
		l.problem(kp, "required (%s)", strings.Join(names, " | "))
	case kind == nil && lookupKind(pr.Kind, !transcriber) != nil && transcriber:
		l.problem(kp, "%s is a processor kind: processors go under processors", pr.Kind)
	case kind == nil && lookupKind(pr.Kind, !transcriber) != nil:
		l.problem(kp, "%s is a transcriber kind: transcribers go under transcribers", pr.Kind)
	case kind == nil:
		l.problem(kp, "must be one of %s", strings.Join(names, " | "))
	default:
		l.validateKindKeys(p, pr, kind)
	}

	if pr.Region == "" {
		l.problem(join(p, "region"), "required: where this processor handles text (\"local\" for on-host), or pending")
	}
	rp := join(p, "retention")
	switch r, err := parseRetention(pr.Retention); {
	case pr.Retention == "":
		l.problem(rp, "required: \"none\", a duration such as 30d, or pending")
	case pr.Retention == Pending:
	case err != nil:
		l.problem(rp, "must be \"none\", a duration such as 30d, or pending")
	case pr.ZeroRetention.Value && r > 0:
		l.problem(join(p, "zero_data_retention"), "contradicts retention %s", pr.Retention)
	}
	if pr.Deletion != "" && !slices.Contains(Deletions, pr.Deletion) {
		l.problem(join(p, "deletion"), "must be one of %s", strings.Join(Deletions, " | "))
	}
	if (pr.Kind == KindRules || pr.Kind == KindPocketsphinx) && len(pr.PendingAnswers()) > 0 {
		l.problem(join(p, pr.PendingAnswers()[0]), "a %s %s runs on this host: its answers are known, never pending", pr.Kind, map[bool]string{false: "processor", true: "transcriber"}[transcriber])
	}
	for _, lim := range []struct {
		key string
		v   int
	}{{"rpm", pr.Limits.RPM}, {"tpm", pr.Limits.TPM}, {"concurrency", pr.Limits.Concurrency}} {
		if lim.v < 0 {
			l.problem(join(join(p, "limits"), lim.key), "must not be negative")
		}
	}
	if pr.Price.InputPerMTok < 0 {
		l.problem(join(join(p, "price"), "input_per_mtok"), "must not be negative")
	}
	if pr.Price.OutputPerMTok < 0 {
		l.problem(join(join(p, "price"), "output_per_mtok"), "must not be negative")
	}
	if pr.Price.BatchDiscount < 0 || pr.Price.BatchDiscount >= 1 {
		l.problem(join(join(p, "price"), "batch_discount"), "must be from 0 up to (not including) 1: the share off for batch items")
	}
	if pr.Budget.PerDayUSD < 0 {
		l.problem(join(join(p, "budget"), "per_day_usd"), "must not be negative")
	}
	if pr.Budget.PerDayUSD > 0 && pr.Price.InputPerMTok == 0 && pr.Price.OutputPerMTok == 0 && pr.Kind != KindRules {
		l.problem(join(p, "budget"), "needs price: the budget is counted from each call's tokens at the processor's price")
	}
	l.validateBatch(join(p, "batch"), &pr.Batch, kind)
	tp := join(p, "timeout")
	if !l.present(tp) {
		pr.Timeout = DefaultTimeout
	} else if pr.Timeout <= 0 {
		l.problem(tp, "must be greater than 0")
	}
}

// validateKindKeys checks the keys whose meaning depends on the kind,
// reading the kind's file and API key.
func (l *loader) validateKindKeys(p string, pr *Processor, kind *kindSpec) {
	if kind.file != "" {
		l.readFile(join(p, kind.file), scoped(kind.file).str(pr))
	}
	for _, k := range scopedKeys {
		if !kind.takes(k.key) && k.set(pr) {
			l.problem(join(p, k.key), "%s", notTaken(kind.name, k.key))
		}
	}
	if pr.MaxTokens < 0 {
		l.problem(join(p, "max_tokens"), "must not be negative")
	}
	if kind.needsAPIKey {
		pr.APIKey = l.env(join(p, "api_key_env"), pr.APIKeyEnv)
	}
	if kind.needsModel && pr.Model == "" {
		l.problem(join(p, "model"), "required for kind %s", kind.name)
	}
	if kind.needsBaseURL && pr.BaseURL == "" {
		l.problem(join(p, "base_url"), "required for kind %s: the resource's endpoint", kind.name)
	}
	if kind.takes("base_url") && pr.BaseURL != "" {
		u, err := url.Parse(pr.BaseURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			l.problem(join(p, "base_url"), "must be an http:// or https:// URL")
		case u.Scheme == "http" && !isLoopback(u.Hostname()):
			l.problem(join(p, "base_url"), "must be https:// for a host that is not loopback: the key and the text would cross the network in the clear")
		}
	}
}

// validateBatch checks a processor's batch settings; kind is nil when the
// processor's kind is unknown.
func (l *loader) validateBatch(bp string, b *BatchSettings, kind *kindSpec) {
	if !l.present(bp) {
		return
	}
	if kind == nil || !kind.batch {
		l.problem(bp, "used only by %s (processors with a batch API)", batchKinds())
	}
	if b.MaxItems < 0 {
		l.problem(join(bp, "max_items"), "must not be negative")
	}
	for _, d := range []struct {
		key string
		v   Duration
	}{{"max_wait", b.MaxWait}, {"poll_first", b.PollFirst}, {"poll_max", b.PollMax}} {
		if d.v < 0 {
			l.problem(join(bp, d.key), "must not be negative")
		}
	}
	if b.OnExpired != "" && !slices.Contains(stet.DispatchModes, b.OnExpired) {
		l.problem(join(bp, "on_expired"), "must be one of sync | batch")
	}
}

// parseRetention reads a processor's retention: "none" (or "0") is zero.
func parseRetention(s string) (time.Duration, error) {
	if s == "none" {
		return 0, nil
	}
	d, err := ParseDuration(s)
	return time.Duration(d), err
}

func (l *loader) validatePolicies(c *Config, ids sectionIDs) {
	for i := range c.Policies {
		l.validatePolicy(index("policies", i), &c.Policies[i], ids.processors, c)
		l.validatePolicyAudio(index("policies", i), &c.Policies[i], ids.transcribers, c)
	}
}

// validateAudioSources checks that a source taking audio runs under a
// policy that lets audio leave for a transcriber, and in sync mode: the
// transcribe step has no batch path.
func (l *loader) validateAudioSources(c *Config) {
	for i := range c.Sources {
		s := &c.Sources[i]
		if !s.AcceptsAudio() {
			continue
		}
		p := index("sources", i)
		if po := c.Policy(s.Policy); po != nil && po.Audio != AudioAllow {
			l.problem(join(p, "media"), "audio needs a policy that says audio: allow and lists transcribers; policy %q does not", s.Policy)
		}
		if s.Mode == stet.ModeBatch {
			l.problem(join(p, "mode"), "must be sync for a source taking audio: transcription has no batch path")
		}
	}
}

// validatePolicyAudio checks what a policy says of audio (docs/design.md
// §19): its transcribers exist, are listed once and are judged against its
// regions and subprocessors as its processors are; audio is allow or deny,
// and allow needs a transcriber.
// validateMembers checks the IDs a policy lists under key (its processors
// or its transcribers, each a noun that handles what): each is defined,
// listed once, in the policy's regions when it lists any, and declares only
// subprocessors the policy allows.
func (l *loader) validateMembers(p, key string, po *Policy, ids []string, defined map[string]bool, lookup func(string) *Processor, noun, what string) {
	dom := po.Domain()
	for i, id := range ids {
		ip := index(join(p, key), i)
		switch {
		case !defined[id]:
			l.problem(ip, "%s %q is not defined under %ss", noun, id, noun)
		case slices.Index(ids, id) < i:
			l.problem(ip, "%s %q is listed twice", noun, id)
		case len(po.Regions) > 0 && lookup(id).Region != Pending && !slices.Contains(po.Regions, lookup(id).Region):
			l.problem(ip, "%s %q handles %s in region %q, which this policy's regions do not allow", noun, id, what, lookup(id).Region)
		default:
			for _, sub := range lookup(id).Subprocessors.List {
				if !dom.AllowsSubprocessor(sub) {
					l.problem(join(p, "allowed_subprocessors"), "%s %q declares subprocessor %q, which this list does not allow", noun, id, sub)
				}
			}
		}
	}
}

func (l *loader) validatePolicyAudio(p string, po *Policy, transcribers map[string]bool, c *Config) {
	ap := join(p, "audio")
	switch po.Audio {
	case "":
		po.Audio = AudioDeny
	case AudioAllow, AudioDeny:
	default:
		l.problem(ap, "must be allow or deny")
	}
	tp := join(p, "transcribers")
	if po.Audio == AudioAllow && len(po.Transcribers) == 0 {
		l.problem(tp, "required with audio: allow: at least one transcriber")
	}
	if po.Audio != AudioAllow && len(po.Transcribers) > 0 {
		l.problem(ap, "must be allow for transcribers to hear audio: audio cannot be minimized, so the policy says so in words")
	}
	l.validateMembers(p, "transcribers", po, po.Transcribers, transcribers, c.Transcriber, "transcriber", "audio")
	if rp := join(join(p, "retention"), "audio"); l.present(rp) && po.Retention.Audio < 0 {
		l.problem(rp, "must not be negative")
	}
}

func (l *loader) validatePolicy(p string, po *Policy, processors map[string]bool, c *Config) {
	pp := join(p, "processors")
	if len(po.Processors) == 0 {
		l.problem(pp, "required: at least one processor")
	}
	l.validateMembers(p, "processors", po, po.Processors, processors, c.Processor, "processor", "text")
	for i, class := range po.Minimize {
		ip := index(join(p, "minimize"), i)
		switch {
		case !slices.Contains(stet.IdentifierClasses, class):
			l.problem(ip, "must be one of %s", joinStrings(stet.IdentifierClasses, ", "))
		case class == stet.IdentName && len(po.Names) == 0:
			l.problem(ip, "name needs a names list to minimize against")
		}
	}
	if !l.present(join(join(p, "retention"), "text")) {
		po.Retention.Text = DefaultTextRetention
	}
	if !l.present(join(join(p, "retention"), "artifacts")) {
		po.Retention.Artifacts = DefaultArtifactRetention
	}
	if !l.present(join(p, "replay_horizon")) {
		po.ReplayHorizon = DefaultReplayHorizon
	}
}

func (l *loader) validateWorkers(w *Workers) {
	positive := func(key string, v *int, def int) {
		p := join("workers", key)
		if !l.present(p) {
			*v = def
		} else if *v < 1 {
			l.problem(p, "must be 1 or more")
		}
	}
	positive("concurrency", &w.Concurrency, DefaultConcurrency)
	positive("max_attempts", &w.MaxAttempts, DefaultMaxAttempts)
	duration := func(key string, v *Duration, def Duration) {
		p := join("workers", key)
		if !l.present(p) {
			*v = def
		} else if *v <= 0 {
			l.problem(p, "must be greater than 0")
		}
	}
	duration("job_timeout", &w.JobTimeout, DefaultJobTimeout)
	duration("rescue_after", &w.RescueAfter, DefaultRescueAfter)
	duration("poll_interval", &w.PollInterval, DefaultPollInterval)
	duration("assemble_every", &w.AssembleEvery, DefaultAssembleEvery)
	duration("sweep_interval", &w.SweepInterval, DefaultSweepInterval)
	duration("heartbeat", &w.Heartbeat, DefaultHeartbeat)
	duration("dead_after", &w.DeadAfter, 4*w.Heartbeat)
	if w.Heartbeat > 0 && w.DeadAfter > 0 && w.DeadAfter < 2*w.Heartbeat {
		l.problem("workers.dead_after", "must be at least twice heartbeat (%s): a live worker would be taken for dead between two beats", w.Heartbeat)
	}
	if w.RescueAfter > 0 && w.RescueAfter <= w.JobTimeout {
		l.problem("workers.rescue_after", "must be greater than job_timeout (%s): a live worker's job would be rescued while it still runs", w.JobTimeout)
	}
}

// Secret strength (docs/design.md §15).
const (
	MinTokenLength = 32 // characters of a bearer token
	MinSecretBytes = 24 // bytes of a webhook secret's key
)

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateSecurity checks admins:, tls:, metrics_listen: and the tenants'
// intake quotas.
func (l *loader) validateSecurity(c *Config) {
	names := map[string]bool{}
	tenantTokens := map[string]bool{}
	for _, t := range c.Tenants {
		for _, tok := range t.Tokens {
			tenantTokens[tok.Value] = true
		}
	}
	for i := range c.Admins {
		a := &c.Admins[i]
		p := index("admins", i)
		switch {
		case a.Name == "":
			l.problem(join(p, "name"), "required")
		case names[a.Name]:
			l.problem(join(p, "name"), "duplicate admin name %q", a.Name)
		}
		names[a.Name] = true
		a.Value = l.env(join(p, "token_env"), a.TokenEnv)
		switch {
		case a.Value == "":
		case len(a.Value) < MinTokenLength:
			l.problem(join(p, "token_env"), "environment variable %s holds a token of %d characters: at least %d are required", a.TokenEnv, len(a.Value), MinTokenLength)
		case tenantTokens[a.Value]:
			l.problem(join(p, "token_env"), "environment variable %s holds a tenant's token: every token must be unique", a.TokenEnv)
		}
	}
	if c.TLS != nil {
		l.readFile("tls.cert_file", &c.TLS.CertFile)
		l.readFile("tls.key_file", &c.TLS.KeyFile)
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			l.problem("metrics_listen", "must be host:port, such as 127.0.0.1:9090")
		}
	}
	for i := range c.Tenants {
		q := c.Tenants[i].Intake
		if q == nil {
			continue
		}
		p := join(index("tenants", i), "intake")
		if q.RPS <= 0 {
			l.problem(join(p, "rps"), "must be greater than 0")
		}
		if q.Burst < 0 {
			l.problem(join(p, "burst"), "must not be negative")
		}
	}
}
