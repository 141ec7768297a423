package api

import "github.com/stetlabs/stet/ledger"

// InspectionView is stet inspect's JSON: the report, if one was asked
// for, and its jobs.
type InspectionView struct {
	Report *ReportView `json:"report,omitempty"`
	Jobs   []JobView   `json:"jobs"`
}

// NewInspectionView builds the view of an inspection.
func NewInspectionView(in *ledger.Inspection) InspectionView {
	v := InspectionView{Jobs: []JobView{}}
	if in.Report != nil {
		r := NewReportView(in.Report)
		v.Report = &r
	}
	for _, j := range in.Jobs {
		v.Jobs = append(v.Jobs, NewJobView(j))
	}
	return v
}
