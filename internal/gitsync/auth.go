package gitsync

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// credentials are the files the fetch authenticates with. They are read at every
// fetch, so that a rotated Secret is picked up without a restart.
type credentials struct {
	username       string
	passwordFile   string
	sshKeyFile     string
	knownHostsFile string
	// secrets are values never to appear in an error: the password read last.
	secrets []string
}

func newCredentials(o Options) (*credentials, error) {
	c := &credentials{username: o.GitUsername, passwordFile: o.GitPasswordFile, sshKeyFile: o.GitSSHKeyFile, knownHostsFile: o.GitKnownHostsFile}
	if c.passwordFile != "" && c.sshKeyFile != "" {
		return nil, errors.New("give either a password file (HTTPS) or an SSH key file, not both")
	}
	if c.sshKeyFile != "" && c.knownHostsFile == "" {
		return nil, errors.New("an SSH key file needs a known_hosts file: host keys are always verified")
	}
	ep, err := transport.NewEndpoint(o.Repo)
	if err != nil {
		return nil, fmt.Errorf("invalid repository %q: %s", RedactURL(o.Repo), RedactURL(err.Error()))
	}
	switch ep.Protocol {
	case "http", "https":
		if c.sshKeyFile != "" {
			return nil, fmt.Errorf("an SSH key file was given for the %s repository %s", ep.Protocol, RedactURL(o.Repo))
		}
	case "ssh":
		if c.passwordFile != "" {
			return nil, fmt.Errorf("a password file was given for the SSH repository %s; give an SSH key file", RedactURL(o.Repo))
		}
	default:
		if c.passwordFile != "" || c.sshKeyFile != "" {
			return nil, fmt.Errorf("credentials were given for the %s repository %s, which takes none", ep.Protocol, RedactURL(o.Repo))
		}
	}
	return c, nil
}

// method is the go-git auth for url; nil means anonymous (or the credentials in an
// HTTPS URL itself, which go-git uses).
func (c *credentials) method(url string) (transport.AuthMethod, error) {
	if c == nil {
		return nil, nil
	}
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return nil, err
	}
	switch {
	case c.passwordFile != "":
		b, err := os.ReadFile(c.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("reading the password file: %w", err)
		}
		password := strings.TrimRight(string(b), "\r\n")
		if password == "" {
			return nil, fmt.Errorf("the password file %s is empty", c.passwordFile)
		}
		c.secrets = []string{password}
		user := c.username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: password}, nil
	case c.sshKeyFile != "":
		user := ep.User
		if user == "" {
			user = c.username
		}
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeysFromFile(user, c.sshKeyFile, "")
		if err != nil {
			return nil, fmt.Errorf("reading the SSH key file %s: %w", c.sshKeyFile, err)
		}
		hostKeys, err := gitssh.NewKnownHostsCallback(c.knownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("reading the known_hosts file %s: %w", c.knownHostsFile, err)
		}
		keys.HostKeyCallback = hostKeys
		return keys, nil
	}
	return nil, nil
}

// userinfo matches the user[:password]@ of a URL with a scheme.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#\s@]*@`)

// RedactURL replaces the user information of every URL in s (https://user:token@host)
// with "redacted", so that an error or log line never carries credentials.
func RedactURL(s string) string {
	return userinfo.ReplaceAllString(s, "${1}redacted@")
}

// redact scrubs err's message of URL credentials and of the password read from
// the password file, in case a server echoed it.
func (m *mirror) redact(err error) error {
	if err == nil {
		return nil
	}
	msg := RedactURL(err.Error())
	if m.auth != nil {
		for _, s := range m.auth.secrets {
			msg = strings.ReplaceAll(msg, s, "redacted")
		}
	}
	if msg == err.Error() {
		return err
	}
	// Not wrapped: the original error's message is the one with the credentials.
	return errors.New(msg)
}
