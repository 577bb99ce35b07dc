package fakecore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// Control is a client of a fake's control API, which serves JSON in plain
// HTTP on a loopback address.
type Control struct {
	// Address is the control API's host:port.
	Address string
}

// Do sends method path with in, if not nil, as its JSON body and decodes
// the answer into out, if not nil. An answer whose code is not one of
// okCodes (200 when none) is an error that carries the answer's message.
func (c Control) Do(ctx context.Context, method, path string, in, out any, okCodes ...int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Address+path, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("control API: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if !slices.Contains(okCodes, resp.StatusCode) && (len(okCodes) > 0 || resp.StatusCode != http.StatusOK) {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("control API: %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("control API: %s %s: %w", method, path, err)
	}
	return nil
}
