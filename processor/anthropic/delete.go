package anthropic

// The deletion side of Client: stet.CopyDeleter over the Message Batches
// API.
//
// Wire facts relied on, and where they come from:
//   - DELETE /v1/messages/batches/{message_batch_id} deletes a batch, its
//     requests and its results, and answers {"id","type":
//     "message_batch_deleted"} (MessageBatchService.Delete and
//     DeletedMessageBatch in messagebatch.go of
//     github.com/anthropics/anthropic-sdk-go/v2@v2.15.0).
//   - A batch can be deleted only once it has ended; an in-progress one must
//     be cancelled first (the same method's comment). stet deletes a
//     batch's copies only after its results are applied, so it has ended.
//     The refusal's status is not documented; the fake answers 400
//     invalid_request_error (assumed), which classifies as unsupported.
//   - An unknown or deleted batch is a 404 not_found_error (as for GET;
//     assumed for DELETE).
//   - Message batches use no files: requests go inline in the create call
//     and results come from the batch's results route, so the batch is the
//     only copy.

import (
	"context"
	"errors"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

var _ stet.CopyDeleter = (*Client)(nil)

// DeleteBatch deletes one ended message batch with its requests and
// results. A batch already gone (404) is done.
func (c *Client) DeleteBatch(ctx context.Context, batchID string) error {
	if !validBatchID(batchID) {
		return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotFound, Err: errors.New("not a batch ID")}
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	var capt batchCapture
	res, err := c.messages.Batches.Delete(callCtx, batchID, sdk.MessageBatchDeleteParams{}, capt.options(c.timeout)...)
	if err != nil {
		return processor.DeleteGone(c.batchError(ctx, callCtx, err, &capt))
	}
	if pe := capt.unexpectedStatus(); pe != nil {
		return pe
	}
	if res == nil || res.ID == "" {
		return capt.Fail(stet.FailureTransient, "", errors.New("batch delete answer names no batch"))
	}
	return nil
}

// DeleteFile makes no call: message batches have no files, so no file of
// theirs can be named. The answer is unsupported with Code
// stet.CodeNoDeleteAPI.
func (c *Client) DeleteFile(ctx context.Context, fileID string) error {
	return processor.NoDeleteAPI("anthropic message batches have no files")
}
