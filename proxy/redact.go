package proxy

import "github.com/ctxmgr/ctxmgr/internal/redact"

// RedactURL returns s with its secrets replaced by REDACTED: the password of the userinfo
// (and a user name that looks like a key), and the value of every query parameter named
// like a key, token, password, secret or signature ("api-key", "access_token", "password",
// "X-Amz-Signature", "sig", ...). It accepts absolute and relative URLs ("/v1/models?key=x")
// and store specs ("postgres://u:pw@host/db?sslpassword=x", "sqlite:path"); key=value
// settings (a libpq DSN, "host=h password=pw") have their secret values redacted too. The
// proxy applies it to every URL it logs or returns.
func RedactURL(s string) string { return redact.URL(s) }

// RedactText redacts every URL quoted in s, as RedactURL does: for error messages, such as
// Go's `Get "URL": ...`.
func RedactText(s string) string { return redact.Text(s) }
