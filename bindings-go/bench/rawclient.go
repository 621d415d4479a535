package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
)

// rawClient is a keep-alive HTTP/1.1 load generator in the way of wrk: it
// writes one fixed request and reads each response's status, finds its
// Content-Length and skips the body, without parsing the headers into a map.
// net/http's client, in the same process as the server, canonicalised and
// stored every response header, so the CPU it spent parsing the limiter's
// headers was charged to the limiter.
type rawClient struct {
	conn    net.Conn
	in      *bufio.Reader
	request []byte
}

func dialRaw(addr, path string) (*rawClient, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawClient{
		conn:    conn,
		in:      bufio.NewReaderSize(conn, 4096),
		request: []byte("GET " + path + " HTTP/1.1\r\nHost: bench\r\nUser-Agent: polylimit-bench\r\n\r\n"),
	}, nil
}

var contentLength = []byte("content-length:")

// get sends the request and returns the response's status once its body is read.
func (c *rawClient) get() (int, error) {
	if _, err := c.conn.Write(c.request); err != nil {
		return 0, err
	}
	line, err := c.in.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length := -1
	for {
		line, err = c.in.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
			length, err = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLength):])))
			if err != nil {
				return 0, fmt.Errorf("bad content-length %q", line)
			}
		}
	}
	if length < 0 {
		return 0, fmt.Errorf("status %d: a response without Content-Length", status)
	}
	if _, err := c.in.Discard(length); err != nil {
		return 0, err
	}
	return status, nil
}

func (c *rawClient) Close() error { return c.conn.Close() }
