package proxy

import (
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces a secret in a redacted URL or text.
const Redacted = "REDACTED"

// secretWords mark a query parameter (or key=value setting) as secret when its name, in
// lower case with '-' and '_' removed, contains one of them.
var secretWords = []string{"key", "token", "secret", "passw", "pwd", "signature", "credential", "auth", "cookie", "session"}

// secretNames are secret parameter names too short to match as substrings safely.
var secretNames = map[string]bool{"sig": true, "pass": true, "code": true, "jwt": true, "sas": true}

// isSecretName reports whether a query parameter or setting named name holds a secret.
func isSecretName(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "", ".", "").Replace(name))
	if secretNames[n] || strings.HasSuffix(n, "sig") {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// RedactURL returns s with its secrets replaced by REDACTED: the password of the userinfo
// (and a user name that looks like a key), and the value of every query parameter named
// like a key, token, password, secret or signature ("api-key", "access_token", "password",
// "X-Amz-Signature", "sig", ...). It accepts absolute and relative URLs ("/v1/models?key=x")
// and store specs ("postgres://u:pw@host/db?sslpassword=x", "sqlite:path"); a string with
// key=value settings separated by spaces (a libpq DSN, "host=h password=pw") has its secret
// values redacted too. Everything else is kept as written, parameter order included.
func RedactURL(s string) string {
	if s == "" {
		return s
	}
	if !strings.Contains(s, "://") && !strings.Contains(s, "?") && strings.Contains(s, "=") {
		return redactSettings(s)
	}
	u, err := url.Parse(s)
	if err != nil {
		// Not parseable: redact what looks like a query and userinfo by hand.
		return redactLoose(s)
	}
	changed := false
	if u.User != nil {
		name := u.User.Username()
		if looksLikeKey(name) {
			name, changed = Redacted, true
		}
		if _, ok := u.User.Password(); ok {
			u.User, changed = url.UserPassword(name, Redacted), true
		} else if changed {
			u.User = url.User(name)
		}
	}
	if u.RawQuery != "" {
		if q, ok := redactQuery(u.RawQuery); ok {
			u.RawQuery, changed = q, true
		}
	}
	if !changed {
		return s
	}
	return u.String()
}

// looksLikeKey reports whether a URL user name is more likely a credential than a name.
func looksLikeKey(name string) bool {
	return strings.HasPrefix(name, "sk-") || strings.HasPrefix(name, "ghp_") || strings.HasPrefix(name, "xox") || len(name) >= 32
}

// redactQuery redacts the secret parameters of a raw query, keeping its order and spelling.
func redactQuery(raw string) (string, bool) {
	parts := strings.Split(raw, "&")
	changed := false
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if isSecretName(name) && (hasValue || p != "") {
			k, _, _ := strings.Cut(p, "=")
			parts[i] = k + "=" + Redacted
			changed = true
		}
	}
	return strings.Join(parts, "&"), changed
}

var settingRE = regexp.MustCompile(`([A-Za-z0-9_.-]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]*)`)

// redactSettings redacts the secret values of key=value settings.
func redactSettings(s string) string {
	return settingRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := settingRE.FindStringSubmatch(m)
		if !isSecretName(sub[1]) {
			return m
		}
		return sub[1] + "=" + Redacted
	})
}

var userinfoRE = regexp.MustCompile(`(://[^/@\s:]*):[^/@\s]*@`)

func redactLoose(s string) string {
	s = userinfoRE.ReplaceAllString(s, "$1:"+Redacted+"@")
	if base, q, ok := strings.Cut(s, "?"); ok {
		if r, changed := redactQuery(q); changed {
			return base + "?" + r
		}
	}
	return s
}

var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+|/[^\s"'<>?]*\?[^\s"'<>]+`)

// RedactText redacts every URL found in s (absolute, or a path with a query), as RedactURL
// does: for error messages, which quote the URL they failed on.
func RedactText(s string) string {
	return urlInText.ReplaceAllStringFunc(s, RedactURL)
}
