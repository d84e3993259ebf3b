"""What a launch does in the live kernel to fork safely: warm torch's lazy imports first, keep track of the
descriptors every run holds, and end the workers if the kernel itself is killed."""
