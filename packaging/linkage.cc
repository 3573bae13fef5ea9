// What the binary carries of the C++ runtime, for --version: gpureap and
// gpureap-portable link libstdc++ and libgcc in (CMakeLists.txt says why); only the
// fuzz build (ASan) loads the shared libstdc++. Each executable compiles this one file
// with its own GPUREAP_LINKAGE, so that both link the same main.o (compiled once).
#ifndef GPUREAP_LINKAGE
#define GPUREAP_LINKAGE "shared libstdc++"
#endif

namespace gpureap {
extern const char kLinkage[];
const char kLinkage[] = GPUREAP_LINKAGE;
}  // namespace gpureap
