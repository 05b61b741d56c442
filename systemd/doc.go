// SPDX-License-Identifier: MIT

// Package systemd holds mptun's systemd unit files; its test checks them
// with systemd-analyze verify.
package systemd
