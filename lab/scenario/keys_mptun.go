// SPDX-License-Identifier: MIT

package scenario

import (
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	"github.com/mptun/mptun/mpdccp/noise"
)

// labKeys are a fresh key pair per end for one lab run: the generated
// configs run mptun in secure mode, as a real deployment does.
// MPTUN_LAB_SECURITY=none runs plain RFC 9897 instead, to compare the
// lab's figures with and without encryption.
type labKeys struct {
	cli, srv, cliPub, srvPub noise.Key
	plain                    bool
}

func newLabKeys() (labKeys, error) {
	var k labKeys
	if os.Getenv("MPTUN_LAB_SECURITY") == "none" {
		return labKeys{plain: true}, nil
	}
	var err error
	for _, kp := range []struct{ priv, pub *noise.Key }{{&k.cli, &k.cliPub}, {&k.srv, &k.srvPub}} {
		if *kp.priv, err = noise.GeneratePrivateKey(rand.Reader); err != nil {
			return k, err
		}
		if *kp.pub, err = noise.PublicKey(*kp.priv); err != nil {
			return k, err
		}
	}
	return k, nil
}

// writeKey adds the [connection] private_key line of side.
func (k labKeys) writeKey(b *strings.Builder, side string) {
	if k.plain {
		b.WriteString("security = \"none\"\n")
		return
	}
	priv := k.cli
	if side == "server" {
		priv = k.srv
	}
	fmt.Fprintf(b, "private_key = %q\n", priv.String())
}

// writePeer adds the [[peer]] section of side: the server for the client
// (it may source anything), the client for the server (its tunnel address).
func (k labKeys) writePeer(b *strings.Builder, side string) {
	if k.plain {
		return
	}
	if side == "client" {
		fmt.Fprintf(b, "\n[[peer]]\npublic_key = %q\nallowed_ips = [\"0.0.0.0/0\", \"::/0\"]\n", k.srvPub.String())
		return
	}
	fmt.Fprintf(b, "\n[[peer]]\npublic_key = %q\nallowed_ips = [\"%s/32\"]\n", k.cliPub.String(), tunnelClient)
}
