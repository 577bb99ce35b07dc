package ukpd

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// TokenFile reads a bearer token from a file and reads it again whenever the
// file changes (another file, size or modification time), so a rotated
// token is picked up on the next request. The token never appears in an
// error. It is safe for concurrent use.
type TokenFile struct {
	path string

	mu    sync.Mutex
	info  os.FileInfo // of the file the token was read from
	token string
}

// NewTokenFile returns a TokenFile for path; the file is first read by Token.
func NewTokenFile(path string) *TokenFile { return &TokenFile{path: path} }

// Token returns the current token, without surrounding white space. It fails
// when the file cannot be read or holds what cannot go into an
// Authorization header (nothing, white space or control characters inside).
func (t *TokenFile) Token() (string, error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("bearer token: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.info != nil && os.SameFile(t.info, fi) && fi.Size() == t.info.Size() && fi.ModTime().Equal(t.info.ModTime()) {
		return t.token, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("bearer token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if err := checkToken(tok); err != nil {
		return "", fmt.Errorf("bearer token file %q: %w", t.path, err)
	}
	t.info, t.token = fi, tok
	return tok, nil
}

// checkToken rejects what cannot go into an Authorization header. It never
// quotes the token.
func checkToken(tok string) error {
	if tok == "" {
		return errors.New("empty")
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7e {
			return errors.New("holds whitespace, control or non-ASCII characters")
		}
	}
	return nil
}
