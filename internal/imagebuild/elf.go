package imagebuild

import (
	"bytes"
	"debug/elf"
	"fmt"
)

// Executable is what an ELF binary's headers say about where it runs.
type Executable struct {
	// Architecture in Go's and OCI's terms: "amd64", "arm64", …
	Architecture string
	// Static is true when the binary needs no dynamic loader (no PT_INTERP header).
	Static bool
}

var elfArchitectures = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_386:     "386",
	elf.EM_ARM:     "arm",
	elf.EM_S390:    "s390x",
	elf.EM_RISCV:   "riscv64",
}

// InspectELF reads the ELF header of a binary.
func InspectELF(data []byte) (Executable, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return Executable{}, fmt.Errorf("not an ELF binary: %w", err)
	}
	defer func() { _ = f.Close() }()
	arch, ok := elfArchitectures[f.Machine]
	if !ok {
		return Executable{}, fmt.Errorf("unknown ELF machine %s", f.Machine)
	}
	exe := Executable{Architecture: arch, Static: true}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			exe.Static = false
		}
	}
	return exe, nil
}
