// SPDX-License-Identifier: MIT

package main

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"strings"

	"github.com/mptun/mptun/mpdccp/noise"
)

// cmdGenkey prints a new private key (base64 X25519), as `wg genkey`.
func cmdGenkey(args []string, stdout io.Writer) error {
	if len(args) != 0 {
		return usageError{"genkey takes no arguments"}
	}
	k, err := noise.GeneratePrivateKey(rand.Reader)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, k.String())
	return err
}

// cmdPubkey reads a private key on stdin and prints its public key, as
// `wg pubkey`: mptun genkey | tee cpe.key | mptun pubkey > cpe.pub
func cmdPubkey(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 0 {
		return usageError{"pubkey takes no arguments; it reads the private key on stdin"}
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 1024)).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("pubkey: %w", err)
	}
	k, err := noise.ParseKey(strings.TrimSpace(line))
	if err != nil {
		return fmt.Errorf("pubkey: %w", err)
	}
	pub, err := noise.PublicKey(k)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, pub.String())
	return err
}
