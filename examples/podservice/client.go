package podservice

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nodelet/nodelet/pkg/provider"
)

// client speaks the service's API (see the package doc).
type client struct {
	base *url.URL
	http *http.Client
}

// serviceError is an answer of the service with an error status. A 404 is
// provider.ErrNotFound.
type serviceError struct {
	method, path string
	code         int
	message      string
}

func (e *serviceError) Error() string {
	return fmt.Sprintf("pod service: %s %s: %d %s: %s", e.method, e.path, e.code, http.StatusText(e.code), e.message)
}

func (e *serviceError) Is(target error) bool {
	return target == provider.ErrNotFound && e.code == http.StatusNotFound
}

// isConflict says whether err is the service's 409: the name is taken.
func isConflict(err error) bool {
	var se *serviceError
	return errors.As(err, &se) && se.code == http.StatusConflict
}

func (c *client) create(ctx context.Context, pod Pod) (Pod, error) {
	var out Pod
	err := c.call(ctx, http.MethodPost, []string{"pods"}, nil, pod, &out)
	return out, err
}

func (c *client) list(ctx context.Context, node string) ([]Pod, error) {
	var out []Pod
	err := c.call(ctx, http.MethodGet, []string{"pods"}, url.Values{"node": {node}}, nil, &out)
	return out, err
}

func (c *client) get(ctx context.Context, namespace, name string) (Pod, error) {
	var out Pod
	err := c.call(ctx, http.MethodGet, []string{"pods", namespace, name}, nil, nil, &out)
	return out, err
}

func (c *client) delete(ctx context.Context, namespace, name string, graceSeconds int64) error {
	q := url.Values{"gracePeriodSeconds": {strconv.FormatInt(graceSeconds, 10)}}
	return c.call(ctx, http.MethodDelete, []string{"pods", namespace, name}, q, nil, nil)
}

// logs returns the log of a container, to be read and closed by the caller.
func (c *client) logs(ctx context.Context, namespace, pod, container string, tail int) (io.ReadCloser, error) {
	var q url.Values
	if tail > 0 {
		q = url.Values{"tail": {strconv.Itoa(tail)}}
	}
	resp, err := c.send(ctx, http.MethodGet, []string{"pods", namespace, pod, "containers", container, "logs"}, q, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (c *client) capacity(ctx context.Context) (Capacity, error) {
	var out Capacity
	err := c.call(ctx, http.MethodGet, []string{"capacity"}, nil, nil, &out)
	return out, err
}

// call sends a request and decodes the JSON answer into out, when not nil.
func (c *client) call(ctx context.Context, method string, path []string, query url.Values, in, out any) error {
	resp, err := c.send(ctx, method, path, query, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("pod service: %s /%s: decode the answer: %w", method, strings.Join(path, "/"), err)
	}
	return nil
}

// send sends a request with in as its JSON body, when not nil, and returns
// the answer when its status is a success, else a *serviceError.
func (c *client) send(ctx context.Context, method string, path []string, query url.Values, in any) (*http.Response, error) {
	where := "/" + strings.Join(path, "/")
	u := c.base.JoinPath(path...)
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("pod service: %s %s: encode the request: %w", method, where, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("pod service: %s %s: %w", method, where, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pod service: %w", err) // names the method and URL
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, &serviceError{method: method, path: where, code: resp.StatusCode, message: errorMessage(resp.Body)}
}

// errorMessage is the message of an error answer: its "error" field, or
// its text.
func errorMessage(body io.Reader) string {
	data, _ := io.ReadAll(io.LimitReader(body, 4096))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(data))
}
