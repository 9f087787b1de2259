# Writes OUT, a source file holding the git commit the tree was built from (short hash, "-dirty" when tracked files
# differ from it, "unknown" outside a git checkout). Run at every build; OUT is rewritten only when its text
# changes, so an unchanged tree relinks nothing.
#   cmake -DSRC=<source dir> -DOUT=<file> -P build_info.cmake
execute_process(COMMAND git -C "${SRC}" rev-parse --short=9 HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no OUTPUT_VARIABLE changes
                  ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "// Written by cmake/build_info.cmake at build time.\nnamespace tandem::cli {\nextern const char kBuildCommit[] = \"${commit}\";\n}  // namespace tandem::cli\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
