# outer.mk - make SANITIZE=1 GOAL... (the Makefile includes this instead of
# its ordinary rules when SANITIZE=1 is given from outside).
#
# The sanitized build must not mix with the ordinary one, and every test
# must run the sanitized ppc and ppvm, which the tests find as
# PP_ROOT/bin/ppc, PP_ROOT/bin/ppvm beside PP_ROOT/schedules. So the goals
# run in build-san/tree: a tree of symlinks to the sources (Makefile,
# compiler/, isa/, kernels/, vm/, tests/, schedules/), where the ordinary
# Makefile (with SANITIZE=1: its sanitizer block) builds into
# build-san/tree/build and build-san/tree/bin, and PP_ROOT is that tree.
# Nothing in build/ or bin/ is touched. `make clean SANITIZE=1` removes it.

SAN_TREE  := build-san/tree
SAN_LINKS := Makefile compiler isa kernels vm tests schedules
SAN_GOALS := $(or $(MAKECMDGOALS),all)

.PHONY: $(SAN_GOALS) san-tree

san-tree:
	@mkdir -p $(SAN_TREE)
	@for f in $(SAN_LINKS); do ln -sfn ../../$$f $(SAN_TREE)/$$f; done

ifeq ($(SAN_GOALS),clean)
clean:
	rm -rf build-san
else
# The first goal runs them all in one inner make (so `make test check
# SANITIZE=1` is one build); the others have nothing left to do. NVCC=:
# CUDA's own code is not built there (see the Makefile's sanitizer block).
$(firstword $(SAN_GOALS)): san-tree
	$(MAKE) -C $(SAN_TREE) $(SAN_GOALS) SANITIZE=1 PP_SAN_INNER=1 NVCC=

$(filter-out $(firstword $(SAN_GOALS)),$(SAN_GOALS)): $(firstword $(SAN_GOALS))
	@:
endif
