package ledger_test

import (
	"testing"

	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/ledger/ledgertest"
)

// Every database the ledger speaks runs the one conformance suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ledgertest.Run(t, func(t *testing.T) *ledger.DB { return open(t, d) })
		})
	}
}
