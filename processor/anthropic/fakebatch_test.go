package anthropic

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
)

// The fake's own batch wire, read through the SDK and under concurrent use.

// TestFakeBatchListWithSDK pages the fake's list through the SDK's own
// auto-pager, both ways, to check the page shape and cursors.
func TestFakeBatchListWithSDK(t *testing.T) {
	t.Parallel()
	f := newFake(t, anthropicfake.Options{})
	c := batchClient(t, f, false, nil)
	var ids []string
	for range 7 {
		ids = append(ids, submit(t, c, batchItems(1)).ProviderID)
	}
	svc := sdk.NewMessageBatchService(option.WithBaseURL(f.URL()), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	var got []string
	pager := svc.ListAutoPaging(t.Context(), sdk.MessageBatchListParams{Limit: sdk.Int(3)})
	for pager.Next() {
		got = append(got, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	newestFirst := slices.Clone(ids)
	slices.Reverse(newestFirst)
	if !slices.Equal(got, newestFirst) {
		t.Errorf("auto-paged list = %v, want newest first %v", got, newestFirst)
	}
	page, err := svc.List(t.Context(), sdk.MessageBatchListParams{Limit: sdk.Int(2), BeforeID: sdk.String(ids[2])})
	if err != nil {
		t.Fatal(err)
	}
	var before []string
	for _, b := range page.Data {
		before = append(before, b.ID)
	}
	if want := []string{ids[4], ids[3]}; !slices.Equal(before, want) || !page.HasMore || page.FirstID != ids[4] || page.LastID != ids[3] {
		t.Errorf("list before %s = %v has_more %v first %s last %s, want %v, more, %s, %s", ids[2], before, page.HasMore, page.FirstID, page.LastID, want, ids[4], ids[3])
	}
}

func TestFakeBatchConcurrentUse(t *testing.T) {
	t.Parallel()
	f := newFake(t, anthropicfake.Options{Batch: anthropicfake.BatchOptions{PollsToEnd: 2}})
	c := batchClient(t, f, false, nil)
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{Items: batchItems(2)})
			if err != nil {
				errs <- err
				return
			}
			for {
				st, err := c.BatchStatus(t.Context(), h.ProviderID)
				if err != nil {
					errs <- err
					return
				}
				if st.State.Terminal() {
					results, err := c.BatchResults(t.Context(), st)
					if err == nil && len(results) != 2 {
						err = fmt.Errorf("%d results, want 2", len(results))
					}
					if err != nil {
						errs <- err
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent batch: %v", err)
	}
	if got := f.BatchCounts(); got.Created != n || got.StatusCalls != 2*n || got.ResultsFetches != n {
		t.Errorf("counts = %+v, want %d batches, %d polls, %d fetches", got, n, 2*n, n)
	}
}
