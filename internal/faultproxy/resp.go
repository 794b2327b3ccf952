package faultproxy

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Reading a RESP request off the client's connection, its bytes kept to
// forward as they came.

// readRequest reads one RESP request, a non-empty array of bulk strings,
// and returns its bytes and its arguments, the command name first.
func readRequest(in *bufio.Reader) ([]byte, []string, error) {
	header, err := in.ReadString('\n')
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasPrefix(header, "*") {
		return nil, nil, fmt.Errorf("faultproxy: not a RESP array: %q", header)
	}
	count, err := strconv.Atoi(strings.TrimSpace(header[1:]))
	if err != nil {
		return nil, nil, err
	}
	if count < 1 {
		return nil, nil, fmt.Errorf("faultproxy: empty request")
	}
	raw := []byte(header)
	args := make([]string, 0, count)
	for range count {
		sizeLine, err := in.ReadString('\n')
		if err != nil {
			return nil, nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(sizeLine, "$")))
		if err != nil {
			return nil, nil, err
		}
		body := make([]byte, size+2) // the bytes and their CRLF
		if _, err := io.ReadFull(in, body); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, sizeLine...), body...)
		args = append(args, string(body[:size]))
	}
	return raw, args, nil
}
