"""A stand-in for a kernel of kernels_dsl.moe that runs it and records each launch's arguments
(the PTX tests compile what the host code really launches)."""


class Recorder:
    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.seen.append((self.kernel, args, dict(meta)))
            return self.kernel[grid](*args, **meta)

        return launch
