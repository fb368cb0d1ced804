//! One integration binary driving the real `gpucompat` CLI. Each area of the product has its own module.
