package config

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

const encryptionYAML = `
encryption:
  keys:
    - {id: k2, key_env: STET_KEY_K2}
    - {id: k1, key_env: STET_KEY_K1}
`

// encryption: reads each key from its variable, first key first; a bad
// key is a problem at its key path that never shows the value.
func TestLoadEncryption(t *testing.T) {
	t.Parallel()
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	env := testEnv()
	env["STET_KEY_K2"], env["STET_KEY_K1"] = good, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{8}, 32))
	dir := writeConfig(t, readExample(t)+encryptionYAML)
	cfg, err := Load(dir+"/stet.yaml", lookup(env))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if e := cfg.Encryption; e == nil || len(e.Keys) != 2 || e.Keys[0].ID != "k2" || !bytes.Equal(e.Keys[0].Key, bytes.Repeat([]byte{7}, 32)) || !e.KeysComplete() {
		t.Fatalf("Encryption = %+v, want k2 then k1 with their keys", cfg.Encryption)
	}

	for _, tt := range []struct {
		name, k2, yaml, wantPath string
	}{
		{name: "short key", k2: base64.StdEncoding.EncodeToString([]byte("sixteen-byte-key")), yaml: encryptionYAML, wantPath: "encryption.keys[0].key_env"},
		{name: "not base64", k2: "not base64 at all!", yaml: encryptionYAML, wantPath: "encryption.keys[0].key_env"},
		{name: "unset", k2: "", yaml: encryptionYAML, wantPath: "encryption.keys[0].key_env"},
		{name: "duplicate id", k2: good, yaml: strings.Replace(encryptionYAML, "id: k1", "id: k2", 1), wantPath: "encryption.keys[1].id"},
		{name: "no keys", k2: good, yaml: "\nencryption:\n  keys: []\n", wantPath: "encryption.keys"},
		{name: "unknown key", k2: good, yaml: encryptionYAML + "    - {id: k3, key_env: STET_KEY_K1, rotate: true}\n", wantPath: "encryption.keys[2].rotate"},
	} {
		env := testEnv()
		env["STET_KEY_K2"], env["STET_KEY_K1"] = tt.k2, good
		var paths []string
		for _, p := range problems(t, readExample(t)+tt.yaml, env, nil) {
			paths = append(paths, p.Path)
			if tt.k2 != "" && strings.Contains(p.Reason, tt.k2) {
				t.Errorf("%s: the problem shows the key: %s", tt.name, p.Reason)
			}
		}
		if !strings.Contains(strings.Join(paths, " "), tt.wantPath) {
			t.Errorf("%s: problems at %v, want one at %s", tt.name, paths, tt.wantPath)
		}
	}
}
