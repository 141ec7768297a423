package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// WriteFiles writes DIR/report.json and DIR/report.html.
func WriteFiles(dir string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o600); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, r); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), buf.Bytes(), 0o600)
}

// Verdict is the one-line summary of a processor: pass, fail or refused,
// and why.
func Verdict(p ProcessorReport) (status, why string) {
	switch {
	case p.Refused != "":
		return "REFUSED", p.Refused + "; no call was made"
	case !p.Acceptance.Rule:
		return "PASS", "the profile has no acceptance rule"
	}
	var parts []string
	for _, c := range p.Acceptance.Checks {
		rel := map[bool]map[string]string{true: {">=": "≥", "<=": "≤"}, false: {">=": "<", "<=": ">"}}[c.Pass][c.Op]
		parts = append(parts, fmt.Sprintf("%s %s %s %s", c.What, pct(c.Got), rel, pct(c.Want)))
	}
	if p.Acceptance.Pass {
		return "PASS", strings.Join(parts, "; ")
	}
	return "FAIL", strings.Join(parts, "; ")
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// Table writes the summary table for a terminal.
func Table(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "profile %s · policy %s · %d labelled documents%s\n\n", r.Profile, r.Policy, r.Labels.Items, splitNote(r))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	hdr := []string{"processor", "verdict", "docs acc [95% CI]"}
	for _, f := range r.Fields {
		hdr = append(hdr, f.Name)
	}
	hdr = append(hdr, "macro-F1", "schema fail", "repair", "refusal", "call p50/p95", "record p95", "$/1k docs")
	fmt.Fprintln(tw, strings.Join(hdr, "\t"))
	for _, p := range r.Processors {
		status, _ := Verdict(p)
		if p.Refused != "" {
			fmt.Fprintf(tw, "%s\t%s\n", p.ID, status)
			continue
		}
		row := []string{p.ID, status, fmt.Sprintf("%.3f [%.3f, %.3f]", p.DocumentAccuracy, p.DocumentCI.Low, p.DocumentCI.High)}
		for _, f := range p.Fields {
			row = append(row, fmt.Sprintf("%.3f", f.Accuracy))
		}
		row = append(row, macro(p), pct(p.SchemaFailureRate), pct(p.RepairRate), pct(p.RefusalRate),
			fmt.Sprintf("%s/%s", ms(p.Latency.CallP50), ms(p.Latency.CallP95)), ms(p.Latency.RecordP95), money(p.Cost))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, p := range r.Processors {
		status, why := Verdict(p)
		fmt.Fprintf(w, "%-7s %s: %s\n", status, p.ID, why)
	}
	return nil
}

func splitNote(r *Report) string {
	if len(r.Labels.Splits) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(r.Labels.Splits) {
		parts = append(parts, fmt.Sprintf("%d %s", r.Labels.Splits[k], k))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// macro is the headline field's macro-F1.
func macro(p ProcessorReport) string { // of the headline field
	for _, f := range p.Fields {
		if f.Enum != nil {
			return fmt.Sprintf("%.3f", f.Enum.MacroF1)
		}
	}
	return "—"
}

func ms(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fs", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fs", v/1000)
	}
	return fmt.Sprintf("%.0fms", v)
}

func money(c Cost) string {
	if !c.Priced {
		return "—"
	}
	return fmt.Sprintf("$%.2f", c.Per1000Docs)
}

// WriteHTML writes the self-contained report page: inline CSS, inline SVG,
// no script, no URL.
func WriteHTML(w io.Writer, r *Report) error {
	type confusion struct{ SVG template.HTML }
	type procView struct {
		ProcessorReport
		Status, Why string
		Confusion   []confusion
	}
	v := struct {
		R                          *Report
		Procs                      []procView
		Accuracy, Latency, CostSVG template.HTML
		HasTags, HasSplits         bool
		Tags                       []string
	}{R: r}
	for _, p := range r.Processors {
		pv := procView{ProcessorReport: p}
		pv.Status, pv.Why = Verdict(p)
		for _, f := range p.Fields {
			if f.Enum == nil {
				continue
			}
			svg, err := confusionChart(p, f)
			if err != nil {
				return err
			}
			pv.Confusion = append(pv.Confusion, confusion{template.HTML(svg)})
		}
		if len(p.ByTag) > 0 {
			v.HasTags = true
		}
		if len(p.BySplit) > 0 {
			v.HasSplits = true
		}
		v.Procs = append(v.Procs, pv)
	}
	if len(ran(r)) > 0 {
		for _, c := range []struct {
			dst *template.HTML
			fn  func(*Report) (string, error)
		}{{&v.Accuracy, accuracyChart}, {&v.Latency, latencyChart}, {&v.CostSVG, costChart}} {
			svg, err := c.fn(r)
			if err != nil {
				return err
			}
			*c.dst = template.HTML(svg)
		}
	}
	seen := map[string]bool{}
	for _, p := range r.Processors {
		for _, t := range p.ByTag {
			if !seen[t.Tag] {
				seen[t.Tag] = true
				v.Tags = append(v.Tags, t.Tag)
			}
		}
	}
	return page.Execute(w, v)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct":   pct,
	"ms":    ms,
	"money": money,
	"f3":    func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"macro": macro,
	"lower": strings.ToLower,
	"tag": func(p ProcessorReport, tag string) string {
		for _, t := range p.ByTag {
			if t.Tag == tag {
				return fmt.Sprintf("%s (%d)", pct(t.Accuracy), t.Items)
			}
		}
		return "—"
	},
	"splitF1": func(p ProcessorReport, split, field string) string {
		for _, sp := range p.BySplit {
			if sp.Split == split {
				return fmt.Sprintf("%.3f", sp.MacroF1[field])
			}
		}
		return "—"
	},
	"kilo": func(n int64) string {
		if n >= 10000 {
			return fmt.Sprintf("%.0fk", float64(n)/1000)
		}
		return fmt.Sprint(n)
	},
	"splits":   func(r *Report) []string { return sortedKeys(r.Labels.Splits) },
	"headline": func(r *Report) string { return headline(r.Fields) },
}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>stet eval · {{.R.Profile}}</title>
<style>
body { font-family: "Liberation Sans", Arial, Helvetica, sans-serif; color: #1d2430; margin: 0; background: #f6f7f9; }
main { max-width: 1236px; margin: 0 auto; padding: 20px 18px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 10px; border-bottom: 1px solid #d8dde5; padding-bottom: 4px; }
.sub { color: #5b6472; margin: 0 0 18px; font-size: 14px; }
.verdicts { display: grid; gap: 8px; margin-bottom: 8px; }
.verdict { display: flex; gap: 12px; align-items: baseline; background: #fff; border-radius: 6px; padding: 10px 14px; border-left: 6px solid #999; box-shadow: 0 1px 2px rgba(0,0,0,.06); font-size: 14px; }
.verdict.pass { border-left-color: #2e7d32; } .verdict.fail { border-left-color: #c62828; } .verdict.refused { border-left-color: #8d6e63; }
.badge { font-weight: 700; font-size: 12px; letter-spacing: .05em; padding: 2px 8px; border-radius: 10px; color: #fff; min-width: 58px; text-align: center; }
.pass .badge { background: #2e7d32; } .fail .badge { background: #c62828; } .refused .badge { background: #8d6e63; }
.verdict b { min-width: 130px; }
.why { color: #424b57; }
table { border-collapse: collapse; background: #fff; font-size: 12.5px; box-shadow: 0 1px 2px rgba(0,0,0,.06); }
th, td { padding: 4px 7px; border-bottom: 1px solid #e6e9ee; text-align: right; white-space: nowrap; }
th { background: #eef1f5; font-weight: 600; }
td:first-child, th:first-child { text-align: left; }
.ci { color: #6b7482; font-size: 11px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
.chart { background: #fff; padding: 8px; border-radius: 6px; box-shadow: 0 1px 2px rgba(0,0,0,.06); }
.chart svg { display: block; }
.note { color: #5b6472; font-size: 13px; max-width: 900px; }
code { font-size: 12px; background: #eef1f5; padding: 1px 4px; border-radius: 3px; }
</style>
</head>
<body><main>
<h1>stet eval · {{.R.Profile}}</h1>
<p class="sub">policy <code>{{.R.Policy}}</code> · {{.R.Labels.Items}} labelled documents{{range $i, $s := splits .R}}{{if eq $i 0}} ({{else}}, {{end}}{{index $.R.Labels.Splits $s}} {{$s}}{{end}}{{if .R.Labels.Splits}}){{end}}{{with .R.Labels.BadLines}} · {{len .}} unusable lines (see report.json){{end}}</p>

<div class="verdicts">
{{range .Procs}}<div class="verdict {{lower .Status}}"><span class="badge">{{.Status}}</span><b>{{.ID}}</b><span class="why">{{.Why}}</span></div>
{{end}}</div>

<h2>Summary</h2>
<table>
<tr><th>processor</th><th>documents right</th>{{range .R.Fields}}<th>{{.Name}}</th>{{end}}<th>{{headline .R}}<br>macro-F1</th><th>schema<br>fail</th><th>repair</th><th>refusal</th><th>call<br>p50 / p95</th><th>to record<br>p50 / p95</th><th>$ per 1k docs<br><span class="ci">tokens in / out</span></th></tr>
{{range .Procs}}{{if .Refused}}<tr><td>{{.ID}}</td><td colspan="12" style="text-align:left">refused: {{.Refused}}</td></tr>{{else}}<tr><td><b>{{.ID}}</b><br><span class="ci">{{.Kind}}{{with .Model}} · {{.}}{{end}}</span></td>
<td>{{pct .DocumentAccuracy}}<br><span class="ci">{{pct .DocumentCI.Low}}–{{pct .DocumentCI.High}}</span></td>
{{range .Fields}}<td>{{pct .Accuracy}}<br><span class="ci">{{pct .CI.Low}}–{{pct .CI.High}}</span></td>{{end}}
<td>{{macro .ProcessorReport}}</td><td>{{pct .SchemaFailureRate}}</td><td>{{pct .RepairRate}}</td><td>{{pct .RefusalRate}}</td>
<td>{{ms .Latency.CallP50}} / {{ms .Latency.CallP95}}</td><td>{{ms .Latency.RecordP50}} / {{ms .Latency.RecordP95}}</td>
<td>{{money .Cost}}<br><span class="ci">{{kilo .Tokens.Input}} / {{kilo .Tokens.Output}}</span></td></tr>{{end}}
{{end}}</table>
<p class="note">Accuracy is exact agreement with the label over every labelled document; a document that ended as a manual record (repairs exhausted, refusal) counts as wrong. Brackets: 95 % percentile-bootstrap interval (2,000 resamples); intervals that overlap much mean the difference may be noise. Latency to record runs from the first call to the review record, retries and repairs included.</p>

{{if .Accuracy}}<h2>Accuracy per field</h2>
<div class="charts"><div class="chart">{{.Accuracy}}</div></div>{{end}}

{{if .HasSplits}}{{$h := headline .R}}<h2>{{$h}} macro-F1 per split</h2>
<table><tr><th>processor</th>{{range splits .R}}<th>{{.}} ({{index $.R.Labels.Splits .}})</th>{{end}}</tr>
{{range .Procs}}{{if not .Refused}}{{$p := .ProcessorReport}}<tr><td>{{.ID}}</td>{{range splits $.R}}<td>{{splitF1 $p . $h}}</td>{{end}}</tr>{{end}}{{end}}
</table>
<p class="note">A rules file written while looking at the dev split is judged on the held-out split; the other splits' figures for every field are in report.json.</p>{{end}}

<h2>Confusion matrices</h2>
<div class="charts">{{range .Procs}}{{range .Confusion}}<div class="chart">{{.SVG}}</div>{{end}}{{end}}</div>

{{if .HasTags}}<h2>Hard cases (accuracy of the headline field, documents)</h2>
<table><tr><th>tag</th>{{range .Procs}}{{if not .Refused}}<th>{{.ID}}</th>{{end}}{{end}}</tr>
{{range $t := .Tags}}<tr><td>{{$t}}</td>{{range $.Procs}}{{if not .Refused}}<td>{{tag .ProcessorReport $t}}</td>{{end}}{{end}}</tr>{{end}}
</table>{{end}}

{{if .Latency}}<h2>Latency and cost</h2>
<div class="charts"><div class="chart">{{.Latency}}</div><div class="chart">{{.CostSVG}}</div></div>{{end}}

<h2>Per class</h2>
{{range .Procs}}{{if not .Refused}}{{$p := .}}{{range .Fields}}{{if .Enum}}
<table style="margin-bottom:12px"><tr><th>{{$p.ID}} · {{.Name}}</th><th>labelled</th><th>predicted</th><th>precision</th><th>recall</th><th>F1</th></tr>
{{range .Enum.Classes}}<tr><td>{{.Class}}</td><td>{{.Support}}</td><td>{{.Predicted}}</td><td>{{f3 .Precision}}</td><td>{{f3 .Recall}}</td><td>{{f3 .F1}}</td></tr>{{end}}
</table>{{end}}{{if .Set}}<p class="note">{{$p.ID}} · {{.Name}} (set): precision {{f3 .Set.Precision}}, recall {{f3 .Set.Recall}}, F1 {{f3 .Set.F1}}</p>{{end}}{{end}}{{end}}{{end}}

<p class="note">Every figure is in report.json next to this page. Made by stet eval on a scratch ledger of its own: no production record was written.</p>
</main></body></html>
`
