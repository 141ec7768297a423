package ledger_test

import (
	"context"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// An empty tenant is never a wildcard: the API's tenant-scoped reads find
// nothing for it, and the CLI reads any tenant through its own functions.
func TestEmptyTenantIsNotAWildcard(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		res := accept(t, db, "ext-1", 1, "text", "d1")
		if _, err := db.GetJob(ctx, "", res.JobID); stet.ErrorCodeOf(err) != stet.ENotFound {
			t.Errorf("GetJob(tenant \"\") = %v, want not found", err)
		}
		if _, err := db.GetReport(ctx, ledger.ReportLookup{ReportID: res.ReportID}); stet.ErrorCodeOf(err) != stet.ENotFound {
			t.Errorf("GetReport(tenant \"\") = %v, want not found", err)
		}
		if _, err := db.GetReview(ctx, "", "rec_none"); stet.ErrorCodeOf(err) != stet.ENotFound {
			t.Errorf("GetReview(tenant \"\") = %v, want not found", err)
		}
		if d, err := db.GetJobAnyTenant(ctx, res.JobID); err != nil || d.Job.ID != res.JobID {
			t.Errorf("GetJobAnyTenant = %v, %v; want the job", d, err)
		}
		if d, err := db.GetReportAnyTenant(ctx, ledger.ReportLookup{SourceID: "reports", ExternalID: "ext-1"}); err != nil || d.Report.ID != res.ReportID {
			t.Errorf("GetReportAnyTenant = %v, %v; want the report", d, err)
		}
	})
}
