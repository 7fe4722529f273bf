package sample

import (
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"
)

// The sample holds exactly the sets Sets names, each with its licence file beside its runs
// (the runs are embedded in the binary: their licences go with them), and nothing else.
func TestSetsAndLicences(t *testing.T) {
	entries, err := fs.ReadDir(FS(), Dir)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			t.Errorf("%s: a file outside the sets", path.Join(Dir, e.Name()))
			continue
		}
		dirs = append(dirs, e.Name())
	}
	if !slices.Equal(dirs, Sets()) {
		t.Fatalf("sets %v, Sets says %v", dirs, Sets())
	}
	for _, set := range dirs {
		files, err := fs.ReadDir(FS(), path.Join(Dir, set))
		if err != nil {
			t.Fatal(err)
		}
		licence, runs := "", 0
		for _, f := range files {
			name := f.Name()
			switch {
			case f.IsDir():
				t.Errorf("%s/%s: a directory inside a set", set, name)
			case strings.HasPrefix(name, "LICENSE"):
				licence = name
			case strings.HasSuffix(name, ".json"):
				runs++
			default:
				t.Errorf("%s/%s: neither a run nor the licence", set, name)
			}
		}
		if licence == "" || runs == 0 {
			t.Errorf("%s: licence %q, %d run files", set, licence, runs)
			continue
		}
		b, err := fs.ReadFile(FS(), path.Join(Dir, set, licence))
		if err != nil || !strings.HasPrefix(string(b), "MIT License") {
			t.Errorf("%s/%s: not an MIT licence (%v)", set, licence, err)
		}
	}
}
